package graphqllimit

import "github.com/vektah/gqlparser/v2/ast"

// use is one limited field as an operation selects it: the selections
// (each resolves at least once) and how many there are.
type use struct {
	rule   *fieldRule
	fields []*ast.Field
	count  int64
}

// collect walks the operation's selections, fragments included, and
// returns the limited fields it selects, in the order it first meets
// them. A selection skipped by @skip or @include is not counted. A field
// selected twice under one response name in one selection set is merged
// by GraphQL into one resolution and counted once; one selected inside a
// list resolves once per item but is counted once: a limit bounds how
// often a request asks for a field, which the store call, made before any
// resolver runs, can know.
func (l *Limiter) collect(op *ast.OperationDefinition, vars map[string]any) []*use {
	c := collector{l: l, vars: vars, byRule: map[*fieldRule]*use{}}
	c.walk(op.SelectionSet, map[string]bool{})
	return c.uses
}

type collector struct {
	l      *Limiter
	vars   map[string]any
	byRule map[*fieldRule]*use
	uses   []*use
}

// walk visits one selection set; seen holds the response names already
// met in it (fragments spread into it share it).
func (c *collector) walk(set ast.SelectionSet, seen map[string]bool) {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			if c.skipped(s.Directives) {
				continue
			}
			if s.ObjectDefinition != nil {
				name := s.Alias
				if name == "" {
					name = s.Name
				}
				key := s.ObjectDefinition.Name + "\x00" + name
				c.count(s, !seen[key])
				seen[key] = true
			}
			c.walk(s.SelectionSet, map[string]bool{})
		case *ast.InlineFragment:
			if !c.skipped(s.Directives) {
				c.walk(s.SelectionSet, seen)
			}
		case *ast.FragmentSpread:
			if !c.skipped(s.Directives) && s.Definition != nil {
				c.walk(s.Definition.SelectionSet, seen)
			}
		}
	}
}

// count records a selection of f; first is false for one GraphQL merges
// into an earlier one (it is refused with it, but not counted again).
func (c *collector) count(f *ast.Field, first bool) {
	r := c.l.fields[f.ObjectDefinition.Name+"."+f.Name]
	if r == nil {
		return
	}
	u := c.byRule[r]
	if u == nil {
		u = &use{rule: r}
		c.byRule[r] = u
		c.uses = append(c.uses, u)
	}
	u.fields = append(u.fields, f)
	if first {
		u.count++
	}
}

// skipped reports whether @skip(if: true) or @include(if: false) leaves
// a selection out.
func (c *collector) skipped(dirs ast.DirectiveList) bool {
	if d := dirs.ForName("skip"); d != nil {
		if v, _ := d.ArgumentMap(c.vars)["if"].(bool); v {
			return true
		}
	}
	if d := dirs.ForName("include"); d != nil {
		if v, ok := d.ArgumentMap(c.vars)["if"].(bool); ok && !v {
			return true
		}
	}
	return false
}
