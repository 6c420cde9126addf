package mcp_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
)

// docs/agents.md's table of what the demo catalogue does with what users
// say is true as written: each row's target, passed by a client without
// elicitation to `processor mcp --dev`'s catalogue, comes to the status
// the row names, bound to the record it names (or offering exactly the
// records it names).
func TestAgentsDocTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/agents.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "<!-- the demo catalogue's table: TestAgentsDocTable runs every row -->")
	if !ok {
		t.Fatal("docs/agents.md: the demo catalogue's table is not marked")
	}
	ticks := regexp.MustCompile("`([^`]+)`")
	number := regexp.MustCompile(`-?\d+`)
	m := config.DevMCP()
	m.Host, m.TenantRef, m.SecurityDomainRef = testenv.HostName, testenv.Tenant, testenv.SecurityDomain
	f := startWith(t, m)
	a := f.connect(t, nil)
	rows := 0
	for _, line := range strings.Split(strings.TrimLeft(table, "\n"), "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 4 {
			t.Fatalf("row %q: want 4 cells", line)
		}
		tool := strings.Trim(strings.TrimSpace(cells[0]), "`")
		target := ticks.FindStringSubmatch(cells[2])
		want := ticks.FindAllStringSubmatch(cells[3], -1)
		if target == nil || len(want) < 2 {
			t.Fatalf("row %q: want a `target` and a `status` with the records", line)
		}
		payload := map[string]any{"reason": "docs table, row " + strconv.Itoa(rows)}
		if tool == "adjust_stock" {
			q, _ := strconv.Atoi(number.FindString(cells[1]))
			if strings.Contains(cells[1], "remove") {
				q = -q
			}
			payload = map[string]any{"quantity": q}
		}
		r, _ := a.call(t, tool, map[string]any{"target": target[1], "payload": payload})
		var records []string
		for _, w := range want[1:] {
			records = append(records, w[1])
		}
		switch status := want[0][1]; {
		case r.Status != status:
			t.Errorf("%s %q: %s (%s), the table says %s", tool, target[1], r.Status, r.WhatToDo, status)
		case status == "needs_clarification":
			var got []string
			for _, c := range r.Candidates {
				got = append(got, c.Choice)
			}
			if !slices.Equal(got, records) {
				t.Errorf("%s %q offers %v, the table says %v", tool, target[1], got, records)
			}
		case r.Record == nil || len(records) != 1 || r.Record.Referent != records[0]:
			t.Errorf("%s %q: bound to %+v, the table says %v", tool, target[1], r.Record, records)
		}
		rows++
	}
	if rows < 5 {
		t.Errorf("%d rows checked", rows)
	}
}
