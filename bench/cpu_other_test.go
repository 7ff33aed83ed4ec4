//go:build !unix

package bench

func processCPU() (float64, bool) { return 0, false }
