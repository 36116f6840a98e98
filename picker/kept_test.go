package picker_test

import (
	"testing"

	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/picker"
)

// A decision without an explanation keeps KeptRanked entries: the routing answer's
// metadata, which lists the scores of up to extproc.MaxScored candidates, must find them.
func TestKeptRankedCoversTheScoredCandidates(t *testing.T) {
	if extproc.MaxScored > picker.KeptRanked {
		t.Fatalf("extproc.MaxScored is %d, over picker.KeptRanked %d: raise KeptRanked", extproc.MaxScored, picker.KeptRanked)
	}
}
