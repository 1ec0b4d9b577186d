package kernel

import "syscall"

// amxPermit asks Linux for the AMX tile data state of this process
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), without which the
// first tile instruction faults. It reports whether it was granted.
func amxPermit() bool {
	const archReqXcompPerm, xfeatureXtiledata = 0x1023, 18
	_, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0)
	return errno == 0
}
