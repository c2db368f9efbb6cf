package status

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"strings"
	"unicode/utf8"
)

// Graph is the topology of `flowrun graph`: pipelines and keys as nodes, what reads and writes
// what as edges.
type Graph struct {
	Nodes []Node
	Edges []Edge
}

// Node is a pipeline (Pipeline set; Label is its name) or a key.
type Node struct {
	ID, Label string
	Pipeline  bool
}

// Edge goes from a key to the pipeline that reads it, or from a pipeline to a key it writes.
type Edge struct{ From, To, Label string }

// Layout sizes, in SVG units (px at scale 1).
const (
	nodeH    = 30
	rowGap   = 70
	colGap   = 24
	margin   = 16
	charW    = 7.2 // 12px monospace
	minNodeW = 80
)

type placed struct {
	Node
	layer   int
	x, y, w float64
}

// layers assigns each node a row: a node sits one below the lowest of the nodes with an edge to
// it, edges that close a cycle not counted, so keys flow down into pipelines and out again.
func layers(g Graph) map[string]int {
	out := map[string][]string{}
	for _, e := range g.Edges {
		out[e.From] = append(out[e.From], e.To)
	}
	// depth-first, in node order, marking the edges that close a cycle
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	back := map[[2]string]bool{}
	var order []string // reverse postorder: a topological order without the back edges
	var visit func(string)
	visit = func(n string) {
		state[n] = open
		for _, m := range out[n] {
			switch state[m] {
			case unseen:
				visit(m)
			case open:
				back[[2]string{n, m}] = true
			}
		}
		state[n] = done
		order = append(order, n)
	}
	// start from the nodes nothing points to, so the roots are the inputs
	hasIn := map[string]bool{}
	for _, e := range g.Edges {
		hasIn[e.To] = true
	}
	for _, n := range g.Nodes {
		if !hasIn[n.ID] && state[n.ID] == unseen {
			visit(n.ID)
		}
	}
	for _, n := range g.Nodes {
		if state[n.ID] == unseen {
			visit(n.ID)
		}
	}
	layer := map[string]int{}
	for i := len(order) - 1; i >= 0; i-- {
		n := order[i]
		for _, m := range out[n] {
			if !back[[2]string{n, m}] && layer[m] < layer[n]+1 {
				layer[m] = layer[n] + 1
			}
		}
	}
	return layer
}

// layout places the nodes in rows, each row centred, in the order of the mean place of their
// parents so that edges cross less.
func layout(g Graph) (map[string]*placed, float64, float64) {
	layer := layers(g)
	nodes := map[string]*placed{}
	rows := map[int][]*placed{}
	maxLayer := 0
	for _, n := range g.Nodes {
		w := max(minNodeW, charW*float64(utf8.RuneCountInString(n.Label))+24)
		p := &placed{Node: n, layer: layer[n.ID], w: w}
		nodes[n.ID] = p
		rows[p.layer] = append(rows[p.layer], p)
		maxLayer = max(maxLayer, p.layer)
	}
	parents := map[string][]string{}
	for _, e := range g.Edges {
		parents[e.To] = append(parents[e.To], e.From)
	}
	width := 0.0
	rowW := make([]float64, maxLayer+1)
	for l := 0; l <= maxLayer; l++ {
		row := rows[l]
		if l > 0 {
			key := map[string]float64{}
			for i, p := range row {
				sum, n := 0.0, 0
				for _, q := range parents[p.ID] {
					if pp := nodes[q]; pp.layer < l {
						sum += pp.x + pp.w/2
						n++
					}
				}
				key[p.ID] = float64(i) * 1e-6 // stable for nodes without parents above
				if n > 0 {
					key[p.ID] += sum / float64(n)
				}
			}
			sortPlaced(row, func(a, b *placed) bool { return key[a.ID] < key[b.ID] })
		}
		x := 0.0
		for _, p := range row {
			p.x = x
			p.y = margin + float64(l)*(nodeH+rowGap)
			x += p.w + colGap
		}
		rowW[l] = x - colGap
		width = max(width, rowW[l])
	}
	for l := 0; l <= maxLayer; l++ {
		shift := margin + (width-rowW[l])/2
		for _, p := range rows[l] {
			p.x += shift
		}
	}
	height := margin*2 + float64(maxLayer+1)*nodeH + float64(maxLayer)*rowGap
	return nodes, width + 2*margin, height
}

func sortPlaced(ps []*placed, less func(a, b *placed) bool) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && less(ps[j], ps[j-1]); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// renderSVG draws g: pipelines as boxes (with data-pipeline, for the page to colour by state),
// keys as rounded pills, edges as curves with their labels.
func renderSVG(g Graph) string {
	if len(g.Nodes) == 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg" class="topology" viewBox="0 0 200 40" width="200" height="40" role="img" aria-label="no pipelines"><text x="10" y="24">no pipelines</text></svg>`
	}
	nodes, w, h := layout(g)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="topology" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="topology: pipelines and the keys they read and write">`, w, h, w, h)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>`)
	for _, e := range g.Edges {
		from, to := nodes[e.From], nodes[e.To]
		if from == nil || to == nil {
			continue
		}
		x1, y1 := from.x+from.w/2, from.y+nodeH
		x2, y2 := to.x+to.w/2, to.y
		c1y, c2y := y1+rowGap/2, y2-rowGap/2
		var d string
		if to.layer <= from.layer { // closes a cycle: out of the right side, round, back in
			x1, y1 = from.x+from.w, from.y+nodeH/2
			x2, y2 = to.x+to.w, to.y+nodeH/2
			d = fmt.Sprintf("M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, y1, x1+60, y1, x2+60, y2, x2, y2)
			c1y, c2y = y1, y2
		} else {
			d = fmt.Sprintf("M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, y1, x1, c1y, x2, c2y, x2, y2)
		}
		fmt.Fprintf(&b, `<path class="edge" d="%s" marker-end="url(#arrow)"/>`, d)
		// the label on the curve, nearer its end, where edges out of one node have parted
		mx, my := bezier(0.7, x1, x1, x2, x2), bezier(0.7, y1, c1y, c2y, y2)
		if to.layer <= from.layer {
			mx, my = max(x1, x2)+45, (y1+y2)/2
		}
		fmt.Fprintf(&b, `<text class="edge-label" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, mx, my+4, html.EscapeString(e.Label))
	}
	for _, n := range g.Nodes {
		p := nodes[n.ID]
		label := html.EscapeString(p.Label)
		if p.Pipeline {
			fmt.Fprintf(&b, `<g class="node pipeline" data-pipeline="%s"><title>pipeline %s</title><rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="4"/>`, label, label, p.x, p.y, p.w, nodeH)
		} else {
			fmt.Fprintf(&b, `<g class="node key"><title>%s</title><rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="15"/>`, label, p.x, p.y, p.w, nodeH)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text></g>`, p.x+p.w/2, p.y+nodeH/2+4, label)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// graphSignature changes when the topology does (a reload), so the page knows to fetch it again.
func graphSignature(g Graph) string {
	h := sha256.New()
	for _, n := range g.Nodes {
		fmt.Fprintf(h, "n%q%q%v\n", n.ID, n.Label, n.Pipeline)
	}
	for _, e := range g.Edges {
		fmt.Fprintf(h, "e%q%q%q\n", e.From, e.To, e.Label)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// bezier is a cubic Bézier coordinate at t.
func bezier(t, p0, p1, p2, p3 float64) float64 {
	u := 1 - t
	return u*u*u*p0 + 3*u*u*t*p1 + 3*u*t*t*p2 + t*t*t*p3
}
