package live

import (
	"context"
	"net/http"

	"github.com/loadaware/loadaware-epp/bench/promtext"
)

// scrape reads url (a /metrics endpoint) and sums its samples by metric name.
func scrape(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	p, err := promtext.Get(ctx, c, url)
	if err != nil {
		return nil, err
	}
	return p.Totals(), nil
}
