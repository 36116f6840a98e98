package replica

import (
	"errors"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/enginemetrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFollowScrapeRecordsTheReading: a replica whose engine pages another scraper fetches
// (Config.ScrapeFollowed) records each followed fetch as its own scrape would: running +
// waiting with the bookings seen when the fetch started, and a failed fetch as an error
// that keeps the counts.
func TestFollowScrapeRecordsTheReading(t *testing.T) {
	n := startNode(t, startNATS(t), func(c *Config) { c.ScrapeInterval, c.ScrapeFollowed = time.Hour, true })
	ep := endpoints[0]
	last := func() (scrapeRec, bool) {
		n.r.load.mu.Lock()
		defer n.r.load.mu.Unlock()
		e := n.r.load.eng[ep]
		if e == nil || len(e.scrapes) == 0 {
			return scrapeRec{}, false
		}
		return e.scrapes[len(e.scrapes)-1], true
	}
	for i, c := range []struct {
		r         enginemetrics.Reading
		err       error
		want      int
		wantBooks uint64 // bookings before the fetch started; one more is made during each
		ok, errs  float64
	}{
		{enginemetrics.Reading{Running: 3, Waiting: 2}, nil, 5, 0, 1, 0},
		{enginemetrics.Reading{}, errors.New("GET /metrics: 500"), 5, 0, 1, 1},
		{enginemetrics.Reading{Running: 1}, nil, 1, 2, 2, 1},
	} {
		done := n.r.FollowScrape(ep)
		if _, err := n.fleet.Book(ep); err != nil {
			t.Fatal(err)
		}
		done(c.r, c.err)
		got, ok := last()
		if !ok || got.count != c.want || got.books != c.wantBooks {
			t.Errorf("fetch %d: the load view's last scrape %+v (%v); want count %d after %d bookings", i, got, ok, c.want, c.wantBooks)
		}
		if ok, errs := testutil.ToFloat64(n.r.met.scrapes.WithLabelValues("ok")), testutil.ToFloat64(n.r.met.scrapes.WithLabelValues("error")); ok != c.ok || errs != c.errs {
			t.Errorf("fetch %d: scrapes ok %v, error %v; want %v, %v", i, ok, errs, c.ok, c.errs)
		}
	}
}
