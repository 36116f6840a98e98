package manifests_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// TestChartReplicas: more than one picker replica renders what sharing state needs in every
// mode: --nats-url (given, or the chart's own NATS), a PodDisruptionBudget, spreading over
// nodes, a rolling update, and in mode envoy a gateway that reaches every replica.
func TestChartReplicas(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantURL  string
		wantNATS bool // the chart's own NATS server is rendered
	}{
		{"inferencepool, given NATS", []string{"--set", "replicaCount=3", "--set", "nats.url=nats://nats.shared:4222"}, "nats://nats.shared:4222", false},
		{"envoy, the chart's NATS", []string{"--set", "mode=envoy", "--set", "replicaCount=2", "--set", "nats.deploy=true"},
			"nats://" + release + "-loadaware-epp-nats.llm.svc.cluster.local:4222", true},
		{"selector, given NATS", []string{"--set", "mode=selector", "--set", "replicaCount=2", "--set", "nats.url=tls://n:4222"}, "tls://n:4222", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, release, tc.args...)
			name := release + "-loadaware-epp"
			d := get[appsv1.Deployment](r, "Deployment", name)
			args := pickerArgs(t, d)
			if args["nats-url"] != tc.wantURL || args["nats-subject"] != "loadaware" {
				t.Errorf("--nats-url %q --nats-subject %q, want %q loadaware", args["nats-url"], args["nats-subject"], tc.wantURL)
			}
			if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
				t.Errorf("strategy %s, want RollingUpdate (replicas warm from each other)", d.Spec.Strategy.Type)
			}
			aff := d.Spec.Template.Spec.Affinity
			if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Errorf("no pod anti-affinity: %+v", aff)
			}
			pdb := get[policyv1.PodDisruptionBudget](r, "PodDisruptionBudget", name)
			if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
				t.Errorf("PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
			}
			if h := get[corev1.Service](r, "Service", name+"-headless"); h.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("headless Service has clusterIP %q", h.Spec.ClusterIP)
			}
			hasNATS := strings.Contains(strings.Join(r.index(), " "), "Deployment/"+name+"-nats")
			if hasNATS != tc.wantNATS {
				t.Errorf("the chart's NATS rendered: %v, want %v (%v)", hasNATS, tc.wantNATS, r.index())
			}
			if cm := r.find("ConfigMap", name+"-envoy"); cm != nil {
				cfg := cm.(*corev1.ConfigMap).Data["envoy.yaml"]
				if !strings.Contains(cfg, "address: "+name+"-headless.llm.svc.cluster.local, port_value: 9002") {
					t.Errorf("mode envoy's gateway does not reach every replica through the headless Service")
				}
			}
		})
	}
	one := render(t, release)
	if d := get[appsv1.Deployment](one, "Deployment", release+"-loadaware-epp"); d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("one replica: strategy %s, want Recreate", d.Spec.Strategy.Type)
	}
	if _, ok := pickerArgs(t, get[appsv1.Deployment](one, "Deployment", release+"-loadaware-epp"))["nats-url"]; ok {
		t.Error("one replica without nats.url got --nats-url")
	}
	if one.find("PodDisruptionBudget", release+"-loadaware-epp") != nil {
		t.Error("one replica got a PodDisruptionBudget (it would block every drain)")
	}
}

func TestChartRejectsReplicasWithoutSharedState(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"two replicas, no NATS", []string{"--set", "replicaCount=2"}, "replicaCount 2 needs shared state: set nats.url"},
		{"the count under another name", []string{"--set", "replicas=2"}, "the picker's replica count is replicaCount (--set replicaCount=2)"},
		{"NATS URL without a scheme", []string{"--set", "replicaCount=2", "--set", "nats.url=nats:4222"}, "/nats/url"},
		{"subject with a wildcard", []string{"--set", "nats.subject=a.>"}, "/nats/subject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := helm(t, append([]string{"template", release, chart, "--namespace", "llm"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("helm template error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// find returns the rendered object of kind and name, or nil.
func (r rendered) find(kind, name string) any {
	for _, o := range r.objs {
		if o.kind == kind && o.name == name {
			return o.value
		}
	}
	return nil
}

// TestChartStateFile: stateFile.enabled passes --state-file into a mounted volume (an
// emptyDir by default, the given source otherwise) on the read-only root filesystem, and is
// refused where there is no LMCache index to save.
func TestChartStateFile(t *testing.T) {
	name := release + "-loadaware-epp"
	tests := []struct {
		name    string
		args    []string
		wantPVC string // "" : the emptyDir default
	}{
		{"default volume", []string{"--set", "stateFile.enabled=true", "--set", "stateFile.interval=10s"}, ""},
		{"a claim", []string{"--set", "stateFile.enabled=true", "--set", "stateFile.interval=10s",
			"--set", "stateFile.volume.emptyDir=null", "--set", "stateFile.volume.persistentVolumeClaim.claimName=epp-state"}, "epp-state"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := get[appsv1.Deployment](render(t, release, tc.args...), "Deployment", name)
			args := pickerArgs(t, d)
			if args["state-file"] != "/var/lib/loadaware-epp/index.state" || args["state-file-interval"] != "10s" {
				t.Errorf("--state-file %q --state-file-interval %q", args["state-file"], args["state-file-interval"])
			}
			mounted := false
			for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
				if m.Name == "state" && m.MountPath == "/var/lib/loadaware-epp" && !m.ReadOnly {
					mounted = true
				}
			}
			if !mounted {
				t.Errorf("no writable state volume at /var/lib/loadaware-epp: %+v", d.Spec.Template.Spec.Containers[0].VolumeMounts)
			}
			var vol *corev1.Volume
			for i, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == "state" {
					vol = &d.Spec.Template.Spec.Volumes[i]
				}
			}
			switch {
			case vol == nil:
				t.Fatal("no state volume")
			case tc.wantPVC == "" && vol.EmptyDir == nil:
				t.Errorf("state volume %+v, want an emptyDir", vol.VolumeSource)
			case tc.wantPVC != "" && (vol.PersistentVolumeClaim == nil || vol.PersistentVolumeClaim.ClaimName != tc.wantPVC || vol.EmptyDir != nil):
				t.Errorf("state volume %+v, want only the claim %s", vol.VolumeSource, tc.wantPVC)
			}
		})
	}
	if _, ok := pickerArgs(t, get[appsv1.Deployment](render(t, release), "Deployment", name))["state-file"]; ok {
		t.Error("--state-file rendered without stateFile.enabled")
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "stateFile.enabled=true", "--set", "cacheSource=vllm-events"}, "cacheSource vllm-events runs no LMCache controller"},
		{[]string{"--set", "stateFile.interval=soon"}, "/stateFile/interval"},
	} {
		if _, err := helm(t, append([]string{"template", release, chart, "--namespace", "llm"}, bad.args...)...); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("helm template %v: %v, want an error containing %q", bad.args, err, bad.want)
		}
	}
}
