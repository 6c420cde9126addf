package main

import "io"

func cmdDemo(args []string, _ io.Reader, stdout, stderr io.Writer) int { return 0 }
