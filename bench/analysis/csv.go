package analysis

import (
	"encoding/csv"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/experiment"
)

// CSVHeader is the published per-request CSV's header.
var CSVHeader = []string{"index", "prefix_id", "send_ts", "ttft_s", "e2e_s", "prompt_tokens", "completion_tokens", "status", "error", "itls_ms"}

// WriteCSV writes one run's requests in the published per-request format:
// times in seconds with microsecond precision, itls_ms as a ';'-separated list
// of milliseconds, empty cells for values a failed request does not have.
func WriteCSV(w io.Writer, rows []experiment.Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, r := range rows {
		itls := make([]string, len(r.ITLs))
		for i, g := range r.ITLs {
			itls[i] = strconv.FormatFloat(g, 'f', 3, 64)
		}
		rec := []string{
			strconv.Itoa(r.Index),
			strconv.Itoa(r.PrefixID),
			secs(r.SendAt),
			secs(r.TTFT),
			secs(r.E2E),
			strconv.Itoa(r.PromptTokens),
			strconv.Itoa(r.CompletionTokens),
			r.Status,
			r.Error,
			strings.Join(itls, ";"),
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func secs(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return ""
	}
	return strconv.FormatFloat(x, 'f', 6, 64)
}
