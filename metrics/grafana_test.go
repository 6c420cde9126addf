package metrics_test

import (
	"encoding/json"
	"path"
	"testing"

	"github.com/portcullis/portcullis/metrics"
)

// The Grafana provisioning files parse, provision a Prometheus data source
// and a file provider, and fit the dashboard.
func TestGrafanaProvisioning(t *testing.T) {
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name      string         `yaml:"name"`
			UID       string         `yaml:"uid"`
			Type      string         `yaml:"type"`
			Access    string         `yaml:"access"`
			URL       string         `yaml:"url"`
			IsDefault bool           `yaml:"isDefault"`
			Editable  bool           `yaml:"editable"`
			JSONData  map[string]any `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	decodeYAML(t, "grafana/provisioning/datasources/portcullis.yml", &ds, true)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("datasources: apiVersion %d, %d data sources", ds.APIVersion, len(ds.Datasources))
	}
	if d := ds.Datasources[0]; d.Type != "prometheus" || d.Access != "proxy" || d.URL == "" || d.Name == "" || !d.IsDefault {
		t.Errorf("data source %+v", d)
	}

	var dp struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name                  string `yaml:"name"`
			OrgID                 int    `yaml:"orgId"`
			Folder                string `yaml:"folder"`
			Type                  string `yaml:"type"`
			DisableDeletion       bool   `yaml:"disableDeletion"`
			AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
			UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
			Options               struct {
				Path                      string `yaml:"path"`
				FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	decodeYAML(t, "grafana/provisioning/dashboards/portcullis.yml", &dp, true)
	if dp.APIVersion != 1 || len(dp.Providers) != 1 {
		t.Fatalf("dashboards: apiVersion %d, %d providers", dp.APIVersion, len(dp.Providers))
	}
	if p := dp.Providers[0]; p.Type != "file" || !path.IsAbs(p.Options.Path) || p.Name == "" {
		t.Errorf("provider %+v", p)
	}

	// The dashboard fits provisioning: a fixed uid, no numeric id, and a
	// $datasource variable that picks a Prometheus data source.
	var dash struct {
		UID        string `json:"uid"`
		ID         *int   `json:"id"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(metrics.Dashboard(), &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || dash.ID != nil {
		t.Errorf("dashboard uid %q, id %v", dash.UID, dash.ID)
	}
	found := false
	for _, v := range dash.Templating.List {
		found = found || v.Name == "datasource" && v.Type == "datasource" && v.Query == ds.Datasources[0].Type
	}
	if !found {
		t.Error(`dashboard has no $datasource variable of type "prometheus"`)
	}
}
