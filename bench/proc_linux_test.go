package bench

import (
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go runs on.
const clockTicks = 100

// procCPU returns the CPU seconds process pid has used, user and system,
// from /proc/PID/stat (10 ms resolution), and whether it could tell.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14, stime 15.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0, false
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, false
	}
	user, err1 := strconv.ParseInt(f[11], 10, 64)
	sys, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(user+sys) / clockTicks, true
}
