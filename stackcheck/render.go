package stackcheck

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Write prints rows as a table, one row per check, each failure followed by its fix,
// then a summary line.
func Write(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tTARGET\tDETAIL")
	failed := 0
	for _, r := range rows {
		target := r.Target
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Status, r.Check, target, r.Detail)
		if r.Status == Fail || r.Status == Blocked {
			failed++
			fmt.Fprintf(tw, "\t  fix:\t\t%s\n", r.Fix)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		_, err := fmt.Fprintf(w, "%d of %d checks did not pass\n", failed, len(rows))
		return err
	}
	_, err := fmt.Fprintf(w, "all %d checks passed\n", len(rows))
	return err
}
