package gie

import (
	"os/exec"
	"strings"
	"testing"
)

const (
	giePath     = "sigs.k8s.io/gateway-api-inference-extension"
	productPath = "github.com/loadaware/loadaware-epp/cmd/loadaware-epp"
	adapterPath = "github.com/loadaware/loadaware-epp/bench/peers/gie"
)

// deps lists the packages pkg links, by `go list -deps` (go test puts its go on PATH).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, msg)
	}
	return strings.Fields(string(out))
}

func gieDeps(list []string) []string {
	var out []string
	for _, p := range list {
		if p == giePath || strings.HasPrefix(p, giePath+"/") {
			out = append(out, p)
		}
	}
	return out
}

// TestProductBinaryExcludesGIE keeps GIE out of the product binary: the bench imports it,
// loadaware-epp must not. The adapter's own dependency list is the control: the same scan
// finds GIE there.
func TestProductBinaryExcludesGIE(t *testing.T) {
	product := deps(t, productPath)
	if len(product) == 0 || product[len(product)-1] != productPath {
		t.Fatalf("go list -deps %s listed %d packages, not ending with the command itself", productPath, len(product))
	}
	if got := gieDeps(product); len(got) != 0 {
		t.Errorf("%s links %d GIE packages (first %s): only bench packages may import %s", productPath, len(got), got[0], giePath)
	}
	if got := gieDeps(deps(t, adapterPath)); len(got) == 0 {
		t.Errorf("the scan finds no GIE package in %s, which imports GIE: the check is broken", adapterPath)
	}
}
