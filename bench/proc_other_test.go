//go:build !linux

package bench

// procCPU cannot tell another process's CPU time here.
func procCPU(int) (float64, bool) { return 0, false }
