//go:build race

package main

// raceDetector reports whether the tests run under -race (see pin_test.go).
const raceDetector = true
