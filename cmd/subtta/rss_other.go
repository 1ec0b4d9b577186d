//go:build !unix

package main

func maxRSSKiB() int64 { return 0 }
