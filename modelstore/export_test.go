package modelstore

// SetDiskFree replaces the free-space probe until restore is called.
func SetDiskFree(f func(string) (int64, error)) (restore func()) {
	old := diskFree
	diskFree = f
	return func() { diskFree = old }
}

// FreeSpace is the real free-space probe.
var FreeSpace = freeSpace
