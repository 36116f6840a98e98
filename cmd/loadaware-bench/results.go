package main

import "github.com/loadaware/loadaware-epp/bench/analysis"

// fmtMetric formats a metric value as the report's tables do.
var fmtMetric = analysis.FormatMetric
