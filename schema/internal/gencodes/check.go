package main

import "fmt"

// check refuses a table whose rows name what its lists do not have, or
// that names a constant, a value or a (phase, code) row twice.
func check() error {
	consts := map[string]bool{}
	values := func(what string, ns []named) (map[string]bool, error) {
		m := map[string]bool{}
		for _, n := range ns {
			if n.Const == "" || n.Value == "" || consts[n.Const] || m[n.Value] {
				return nil, fmt.Errorf("%s %q (%s): empty or written twice", what, n.Value, n.Const)
			}
			consts[n.Const], m[n.Value] = true, true
		}
		return m, nil
	}
	ph, err := values("phase", phases)
	if err != nil {
		return err
	}
	bd, err := values("boundary", boundaries)
	if err != nil {
		return err
	}
	tr, err := values("effect truth", truths)
	if err != nil {
		return err
	}
	var kn []named
	for _, k := range kinds {
		if !tr[k.Truth] {
			return fmt.Errorf("kind %s: unknown effect truth %q", k.Value, k.Truth)
		}
		kn = append(kn, k.named)
	}
	ks, err := values("kind", kn)
	if err != nil {
		return err
	}
	if _, err := values("status", statuses); err != nil {
		return err
	}
	var cn []named
	for _, c := range codes {
		cn = append(cn, c.named)
	}
	cs, err := values("code", cn)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	seen := map[[2]string]bool{}
	for _, r := range rows {
		switch {
		case !ph[r.Phase]:
			return fmt.Errorf("row %s/%s: unknown phase", r.Phase, r.Code)
		case !cs[r.Code]:
			return fmt.Errorf("row %s/%s: unknown code", r.Phase, r.Code)
		case r.Kind != "" && !ks[r.Kind]:
			return fmt.Errorf("row %s/%s: unknown kind %q", r.Phase, r.Code, r.Kind)
		case !bd[r.Boundary]:
			return fmt.Errorf("row %s/%s: unknown boundary %q", r.Phase, r.Code, r.Boundary)
		case seen[[2]string{r.Phase, r.Code}]:
			return fmt.Errorf("row %s/%s: written twice", r.Phase, r.Code)
		}
		seen[[2]string{r.Phase, r.Code}], used[r.Code] = true, true
	}
	for _, c := range codes {
		if !used[c.Value] {
			return fmt.Errorf("code %s is in no phase", c.Value)
		}
	}
	for _, ls := range [][]label{results, attemptStatuses} {
		m := map[string]bool{}
		for _, l := range ls {
			if l.Const == "" || l.Value == "" || consts[l.Const] || m[l.Value] {
				return fmt.Errorf("label value %q (%s): empty or written twice", l.Value, l.Const)
			}
			consts[l.Const], m[l.Value] = true, true
		}
	}
	return nil
}

// constOf maps wire values to Go names.
func constOf(ns []named) map[string]string {
	m := map[string]string{}
	for _, n := range ns {
		m[n.Value] = n.Const
	}
	return m
}

func codeNamed() []named {
	out := make([]named, len(codes))
	for i, c := range codes {
		out[i] = c.named
	}
	return out
}

func kindNamed() []named {
	out := make([]named, len(kinds))
	for i, k := range kinds {
		out[i] = k.named
	}
	return out
}
