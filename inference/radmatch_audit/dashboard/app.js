/* RadMatch audit dashboard. Plain JS, no network, no framework.
 * Every piece of record text reaches the page through text nodes (el() below):
 * report text is untrusted input and never becomes markup. */
(function () {
  "use strict";

  var DATA = JSON.parse(document.getElementById("data").textContent);
  var S = DATA.summary;
  var PAIRS = DATA.pairs;
  var CMP = DATA.compare;
  var PAGE_SIZE = 100;
  // Every enum comes with the data, from the scoring core: the page keeps no list of its own.
  var V = DATA.vocabulary;
  var OUTCOMES = V.outcomes;
  var OUTCOME_NAMES = V.outcome_names;
  var DIMENSIONS = V.dimensions;
  var SEVERITY_LEVELS = V.severity_levels;
  var SUBSETS = V.subsets;
  var TIERS = Object.keys(V.safety_tiers);
  var TRIAGE = Object.create(null);
  V.safety_tiers.triage.forEach(function (tier) { TRIAGE[tier] = true; });
  var TRI = "\u25B2";

  // ------------------------------------------------------------------ helpers

  /* el(tag, props, ...children): children are nodes or plain text (text nodes). */
  function el(tag, props) {
    var node = document.createElement(tag);
    if (props) {
      Object.keys(props).forEach(function (k) {
        var v = props[k];
        if (v === null || v === undefined || v === false) return;
        if (k === "class") node.className = v;
        else if (k === "data") Object.keys(v).forEach(function (d) { node.dataset[d] = String(v[d]); });
        else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), v);
        else node.setAttribute(k, String(v));
      });
    }
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }
  function append(node, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(child instanceof Node ? child : document.createTextNode(visible(String(child))));
  }
  /* Bidirectional controls (U+202A-202E, U+2066-2069, U+200E/F) would reorder what is
   * drawn ("left" shown where the judge read "tfel"): they are shown as marks instead. */
  var BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F]/g;
  function visible(text) {
    return text.replace(BIDI, function (c) {
      return "\u27E8U+" + c.charCodeAt(0).toString(16).toUpperCase() + "\u27E9";
    });
  }
  function $(id) { return document.getElementById(id); }
  function pct(x) { return x === null || x === undefined ? "\u2014" : (100 * x).toFixed(1) + "%"; }
  function num(x, digits) {
    if (x === null || x === undefined) return "\u2014";
    return digits === undefined ? String(x) : Number(x).toFixed(digits);
  }
  function signed(x) { return x === null || x === undefined ? "\u2014" : (x > 0 ? "+" : "") + x; }
  function ci(pair) { return pair ? (100 * pair[0]).toFixed(1) + "\u2013" + pct(pair[1]) : "no data"; }
  /* A number shown on the page, tagged with its path in the summary for checking. */
  function stat(key, value, text) {
    return el("span", { class: "stat", data: { key: key, value: JSON.stringify(value) } }, text);
  }
  function pill(outcome) {
    var cls = outcome ? outcome.toLowerCase() : "generic";
    return el("span", { class: "pill o-" + cls, title: OUTCOME_NAMES[outcome || "generic"] },
      outcome || "generic");
  }
  function panel(title, sub) {
    var body = el("div", { class: "panel-body" });
    var node = el("section", { class: "panel" },
      el("div", { class: "panel-head" }, el("h2", null, title), sub ? el("p", { class: "hint" }, sub) : null),
      body);
    return { node: node, body: body };
  }
  function ratioBar(value, interval) {
    var bar = el("div", { class: "ratio-bar" });
    if (interval) {
      var w = el("div", { class: "ci" });
      w.style.left = (100 * interval[0]) + "%";
      w.style.width = (100 * (interval[1] - interval[0])) + "%";
      bar.appendChild(w);
    }
    if (value !== null && value !== undefined) {
      var dot = el("div", { class: "dot" });
      dot.style.left = (100 * value) + "%";
      bar.appendChild(dot);
    }
    return bar;
  }

  // ------------------------------------------------------------------ corpus view

  function renderCorpus() {
    var root = $("corpus");
    var cards = el("div", { class: "cards" },
      card("Pairs", stat("n_pairs", S.n_pairs, num(S.n_pairs)), S.n_scored + " scored"),
      card("Failed pairs", stat("n_failed", S.n_failed, num(S.n_failed)), "judge error, not scored",
        S.n_failed ? "warn" : ""),
      significantCard(),
      card("Mean actionable errors (RadMatch)", stat("mean_actionable_errors", S.mean_actionable_errors,
        num(S.mean_actionable_errors, 2)), S.mean_actionable_errors_ci ? ["per scored pair; 95% CI ",
          stat("mean_actionable_errors_ci", S.mean_actionable_errors_ci, num(S.mean_actionable_errors_ci[0], 2) +
            "\u2013" + num(S.mean_actionable_errors_ci[1], 2)),
          " (bootstrap over " + S.n_studies + " stud" + (S.n_studies === 1 ? "y" : "ies") + ")"] : "per scored pair", "key"),
      card("Actionable errors", stat("actionable_errors", S.actionable_errors,
        num(S.actionable_errors)), V.error_outcomes.join("/") + " units at a " +
        V.actionable_tiers.join("/") + " tier"),
      card("Triage recall", stat("safety.triage.recall", S.safety.triage.recall,
        pct(S.safety.triage.recall)), V.safety_tiers.triage.join("/") + " reference findings kept"));
    root.replaceChildren.apply(root, judgeBlock(DATA.judges || [], "").concat([cards]));

    var grid = el("div", { class: "grid2" });
    grid.appendChild(outcomePanel());
    grid.appendChild(safetyPanel());
    grid.appendChild(subsetPanel());
    grid.appendChild(heatPanel());
    root.appendChild(grid);
    var warnings = (S.warnings || []).concat(DATA.bad_lines || []);
    if (warnings.length) {
      var w = panel("Warnings");
      w.body.appendChild(el("ul", { class: "warnings" }, warnings.map(function (t) { return el("li", null, t); })));
      root.appendChild(w.node);
    }
  }

  /* The error adjudication's mean, the headline where it ran; not available otherwise. */
  function significantCard() {
    var states = S.adjudication || {};
    var left = Object.keys(states).filter(function (k) { return k !== "current" && states[k]; })
      .map(function (k) { return states[k] + " " + k; }).join(", ");
    if (!S.n_adjudicated) {
      return card("Mean significant errors", el("span", { class: "stat na", id: "mean-significant" }, "\u2014"),
        "not available: no pair's error adjudication stands" + (left ? " (" + left + ")" : ""), "");
    }
    var interval = S.mean_significant_errors_ci;
    return card("Mean significant errors", stat("mean_significant_errors", S.mean_significant_errors,
      num(S.mean_significant_errors, 2)), [
      "per pair, error adjudication; ",
      interval ? ["95% CI ", stat("mean_significant_errors_ci", interval, num(interval[0], 2) + "\u2013" +
        num(interval[1], 2)), "; "] : null,
      "n ", stat("n_adjudicated", S.n_adjudicated, num(S.n_adjudicated)),
      left ? " (not counted: " + left + ")" : ""], "key");
  }

  function judgeName(j) { return (j.backend || "?") + " / " + (j.model || "?"); }

  /* Which judge scored the pairs, and a warning when it is the embedded small model. */
  function judgeBlock(judges, whose) {
    var small = judges.filter(function (j) { return j.small; });
    var nSmall = small.reduce(function (t, j) { return t + j.pairs; }, 0);
    var line = el("div", { class: "judge-line", id: whose ? null : "judges" },
      el("span", { class: "card-label" }, "Judge" + (judges.length > 1 ? "s" : "") + (whose ? " of " + whose : "")),
      judges.length ? judges.map(function (j) {
        return el("span", { class: "judge" + (j.small ? " small" : ""), data: { backend: j.backend, model: j.model } },
          el("span", { class: "judge-name" }, judgeName(j)),
          el("span", { class: "muted" }, " " + j.pairs + " pair" + (j.pairs === 1 ? "" : "s")));
      }) : el("span", { class: "muted" }, "not recorded in the records"));
    if (!small.length) return [line];
    return [el("div", { class: "banner warn", role: "alert", id: whose ? null : "small-judge-warning" },
      el("span", { class: "banner-title" }, "Embedded small judge" + (whose ? " (" + whose + ")" : "") + ": these scores are not clinical. "),
      nSmall + " pair" + (nSmall === 1 ? " was" : "s were") + " scored by " + small.map(judgeName).join(", ") +
      ", the small model RadMatch embeds to exercise its pipeline without a judge server; its clinical " +
      "judgement is not meaningful. For real scores evaluate again with a judge server " +
      "(serve/start_vllm.sh, --base-url)."), line];
  }

  function card(label, value, sub, cls) {
    return el("div", { class: "card " + (cls || "") }, el("div", { class: "card-label" }, label),
      el("div", { class: "card-value" }, value), el("div", { class: "card-sub" }, sub));
  }

  function outcomePanel() {
    var p = panel("Unit outcomes", "All tiers. Generic: normal findings covered only by boilerplate.");
    var o = S.outcomes;
    var total = OUTCOMES.reduce(function (t, k) { return t + o[k.toLowerCase()]; }, 0) || 1;
    var bar = el("div", { class: "stack" });
    OUTCOMES.forEach(function (k) {
      var seg = el("div", { class: "seg o-" + k.toLowerCase(), title: k + ": " + o[k.toLowerCase()] });
      seg.style.width = (100 * o[k.toLowerCase()] / total) + "%";
      bar.appendChild(seg);
    });
    var legend = el("div", { class: "outcome-legend" }, OUTCOMES.map(function (k) {
      var key = k.toLowerCase();
      return el("div", { class: "ol-item" }, pill(k), el("span", { class: "ol-name" }, OUTCOME_NAMES[k]),
        stat("outcomes." + key, o[key], num(o[key])));
    }), el("div", { class: "ol-item" }, pill(null), el("span", { class: "ol-name" }, "generic"),
      stat("outcomes.generic", o.generic, num(o.generic))));
    append(p.body, [bar, legend]);
    var a = S.attribution;
    if (a) {
      append(p.body, [el("h3", null, "Evidence attribution",
        el("span", { class: "hint" }, " findings whose quotes all occur in their report")), el("table", { class: "mini" },
        el("thead", null, el("tr", null, el("th", null, "side"), el("th", null, "attributed / findings"),
          el("th", null, "rate"), el("th", null, "95% CI"))),
        el("tbody", null, ["reference", "candidate"].map(function (side) {
          var s = a[side];
          return el("tr", null, el("td", null, side),
            el("td", null, stat("attribution." + side + ".attributed", s.attributed, num(s.attributed)),
              " / ", stat("attribution." + side + ".findings", s.findings, num(s.findings))),
            el("td", null, stat("attribution." + side + ".rate", s.rate, pct(s.rate))),
            el("td", { class: "muted" }, stat("attribution." + side + ".rate_ci", s.rate_ci, ci(s.rate_ci))));
        })))]);
    }
    return p.node;
  }

  function safetyPanel() {
    var p = panel("Safety: precision and recall", "Pooled over findings, 95% Wilson intervals. " +
      TIERS.map(function (tier) { return tier + " = " + V.safety_tiers[tier].join("/"); }).join("; ") + ".");
    var rows = TIERS.map(function (tier) {
      var s = S.safety[tier];
      var k = "safety." + tier + ".";
      return el("tr", null, el("th", null, tier),
        el("td", { class: "num" }, stat(k + "precision", s.precision, pct(s.precision))),
        el("td", { class: "muted small" }, stat(k + "precision_ci", s.precision_ci, ci(s.precision_ci)), el("br"),
          stat(k + "precision_num", s.precision_num, num(s.precision_num)), " / ",
          stat(k + "precision_den", s.precision_den, num(s.precision_den))),
        el("td", null, ratioBar(s.precision, s.precision_ci)),
        el("td", { class: "num" }, stat(k + "recall", s.recall, pct(s.recall))),
        el("td", { class: "muted small" }, stat(k + "recall_ci", s.recall_ci, ci(s.recall_ci)), el("br"),
          stat(k + "recall_num", s.recall_num, num(s.recall_num)), " / ",
          stat(k + "recall_den", s.recall_den, num(s.recall_den))),
        el("td", null, ratioBar(s.recall, s.recall_ci)));
    });
    p.body.appendChild(el("table", { class: "safety" },
      el("thead", null, el("tr", null, el("th", null, "tier"), el("th", null, "precision"),
        el("th", null, "95% CI, n"), el("th", { class: "barcol" }, ""), el("th", null, "recall"),
        el("th", null, "95% CI, n"), el("th", { class: "barcol" }, ""))),
      el("tbody", null, rows)));
    return p.node;
  }

  function subsetPanel() {
    var p = panel("Actionable errors by subset",
      "Normal and abnormal partition the units; comparison and measurement overlap them.");
    var max = Math.max.apply(null, SUBSETS.map(function (s) { return S.subsets[s].actionable_errors; }).concat([1]));
    var rows = SUBSETS.map(function (name) {
      var s = S.subsets[name];
      var bar = el("div", { class: "hbar" }, el("div", { class: "hbar-fill" }));
      bar.firstChild.style.width = (100 * s.actionable_errors / max) + "%";
      return el("tr", null, el("th", null, name),
        el("td", { class: "num strong" }, stat("subsets." + name + ".actionable_errors",
          s.actionable_errors, num(s.actionable_errors))),
        el("td", { class: "barcol" }, bar),
        OUTCOMES.map(function (k) {
          var key = k.toLowerCase();
          return el("td", { class: "num" }, stat("subsets." + name + "." + key, s[key], num(s[key])));
        }));
    });
    p.body.appendChild(el("table", { class: "subsets" },
      el("thead", null, el("tr", null, el("th", null, "subset"), el("th", null, "actionable errors"),
        el("th", { class: "barcol" }, ""), OUTCOMES.map(function (k) { return el("th", { class: "num" }, k); }))),
      el("tbody", null, rows)));
    return p.node;
  }

  function heatPanel() {
    var p = panel("Attribute errors",
      "Matched units by their worst error in each dimension; shading is the share of the row.");
    var rows = DIMENSIONS.map(function (dim) {
      var d = S.attributes[dim];
      var total = SEVERITY_LEVELS.reduce(function (t, sev) { return t + d[sev]; }, 0) || 1;
      return el("tr", null, el("th", null, dim), SEVERITY_LEVELS.map(function (sev) {
        var share = d[sev] / total;
        var cell = el("td", { class: "heat h-" + sev, title: dim + " " + sev + ": " + pct(share) },
          stat("attributes." + dim + "." + sev, d[sev], num(d[sev])),
          el("span", { class: "share" }, pct(share)));
        cell.style.setProperty("--a", String(0.08 + 0.85 * share));
        return cell;
      }));
    });
    p.body.appendChild(el("table", { class: "heatmap" },
      el("thead", null, el("tr", null, el("th", null, "dimension"),
        SEVERITY_LEVELS.map(function (sev) { return el("th", null, sev); }))),
      el("tbody", null, rows)));
    return p.node;
  }

  function renderCompare() {
    if (!CMP) return;
    var B = CMP.summary_b;
    var p = panel("Comparison: " + CMP.label_a + " vs " + CMP.label_b,
      "\u0394 = actionable errors of " + CMP.label_b + " minus " + CMP.label_a + ", per pair.");
    var t = el("table", { class: "mini compare" },
      el("thead", null, el("tr", null, el("th", null, ""), el("th", null, CMP.label_a), el("th", null, CMP.label_b))),
      el("tbody", null,
        el("tr", null, el("th", null, "mean actionable errors"), el("td", null, num(S.mean_actionable_errors, 2)),
          el("td", null, stat("compare.mean_actionable_errors", B.mean_actionable_errors, num(B.mean_actionable_errors, 2)))),
        el("tr", null, el("th", null, "triage recall"), el("td", null, pct(S.safety.triage.recall)),
          el("td", null, pct(B.safety.triage.recall))),
        el("tr", null, el("th", null, "triage precision"), el("td", null, pct(S.safety.triage.precision)),
          el("td", null, pct(B.safety.triage.precision))),
        el("tr", null, el("th", null, "failed pairs"), el("td", null, num(S.n_failed)), el("td", null, num(B.n_failed)))));
    var cards = el("div", { class: "cards small" },
      card("Pairs compared", stat("compare.n_compared", CMP.n_compared, num(CMP.n_compared)),
        CMP.n_only_a + " only in " + CMP.label_a + ", " + CMP.n_only_b + " only in " + CMP.label_b),
      card("Mean \u0394", stat("compare.mean_delta", CMP.mean_delta, CMP.mean_delta === null ? "\u2014" :
        (CMP.mean_delta > 0 ? "+" : "") + CMP.mean_delta.toFixed(2)), "actionable errors per pair"),
      card("Fewer errors", stat("compare.fewer", CMP.fewer, num(CMP.fewer)), "pairs where " + CMP.label_b + " has fewer"),
      card("More errors", stat("compare.more", CMP.more, num(CMP.more)), "pairs where " + CMP.label_b + " has more"),
      card("Same", stat("compare.same", CMP.same, num(CMP.same)), "pairs with \u0394 = 0"));
    append(p.body, judgeBlock(CMP.judges_b || [], CMP.label_b));
    append(p.body, [cards, t, pairedStats(CMP.stats)]);
    $("compare").replaceChildren(p.node);
  }

  function signedFixed(x, digits) {
    return x === null || x === undefined ? "\u2014" : (x > 0 ? "+" : "") + Number(x).toFixed(digits);
  }

  /* radmatch-audit compare: mean difference per tier with its bootstrap interval and p-value. */
  function pairedStats(st) {
    if (!st) return null;
    var why = { only_in_a: "only in " + CMP.label_a, only_in_b: "only in " + CMP.label_b,
      failed_in_a: "failed in " + CMP.label_a, failed_in_b: "failed in " + CMP.label_b,
      failed_in_both: "failed in both", different_reference: "with a different reference" };
    var dropped = Object.keys(st.dropped).filter(function (k) { return st.dropped[k]; }).map(function (k) {
      return st.dropped[k] + " " + (why[k] || k.replace(/_/g, " "));
    });
    var rows = st.rows.map(function (r) {
      var k = "compare.stats." + r.tier + ".";
      var ci = r.ci ? signedFixed(r.ci[0], 3) + " to " + signedFixed(r.ci[1], 3) : "\u2014";
      return el("tr", { class: r.tier === "actionable" ? "total" : "", data: { tier: r.tier } },
        el("th", null, r.tier + (r.actionable ? "" : " *")),
        el("td", { class: "num" }, num(r.mean_a, 3)), el("td", { class: "num" }, num(r.mean_b, 3)),
        el("td", { class: "num strong" + (r.mean_difference > 0 ? " worse" : r.mean_difference < 0 ? " better" : "") },
          stat(k + "mean_difference", r.mean_difference, signedFixed(r.mean_difference, 3))),
        el("td", { class: "num" }, stat(k + "ci", r.ci, ci)),
        el("td", { class: "num" }, stat(k + "p_value", r.p_value, r.p_value === null ? "\u2014" :
          (r.p_value < 0.001 ? "<0.001" : Number(r.p_value).toFixed(3)))),
        el("td", { class: "num" }, num(r.b_better)), el("td", { class: "num" }, num(r.b_worse)),
        el("td", { class: "num" }, num(r.same)));
    });
    var perm = st.permutation, boot = st.bootstrap;
    return el("div", { class: "paired", id: "paired-stats" },
      el("h3", null, "Paired difference, " + CMP.label_b + " minus " + CMP.label_a,
        el("span", { class: "hint" }, " actionable errors per pair; negative: " + CMP.label_b + " makes fewer")),
      el("p", { class: "muted small" }, stat("compare.stats.n_compared", st.n_compared, num(st.n_compared)),
        " pairs scored by both, in " + st.n_studies + " studies; " +
        (dropped.length ? "dropped " + dropped.join(", ") : "none dropped") + "."),
      el("table", { class: "mini paired-table" },
        el("thead", null, el("tr", null, ["tier", "mean " + CMP.label_a, "mean " + CMP.label_b, "\u0394",
          Math.round(100 * st.confidence) + "% CI", "p", "better", "worse", "same"].map(function (h) { return el("th", null, h); }))),
        el("tbody", null, rows)),
      el("p", { class: "hint" }, "* routine errors are counted but are not actionable. CI: paired bootstrap over studies (" +
        boot.n_resamples + " resamples, seed " + boot.seed + "); p: " + perm.test + " (" + perm.method + ", " +
        perm.n_permutations + " sign vectors). The same numbers as radmatch-audit compare."));
  }

  // ------------------------------------------------------------------ pairs table

  var COLUMNS = [
    { key: "id", label: "Pair", get: function (p) { return p.id; }, dir: 1 },
    { key: "study", label: "Study", get: function (p) { return p.study; }, dir: 1 },
    { key: "se", label: "Significant errors", get: function (p) { return p.se; }, dir: -1, num: true },
    { key: "ae", label: "Actionable errors", get: function (p) { return p.ae; }, dir: -1, num: true }
  ];
  if (CMP) {
    COLUMNS.push({ key: "ae_b", label: "AE " + CMP.label_b, get: function (p) { return p.ae_b; }, dir: -1, num: true });
    COLUMNS.push({ key: "delta", label: "\u0394 AE", get: function (p) { return p.delta; }, dir: -1, num: true,
      fmt: signed, absSort: true });
  }
  OUTCOMES.forEach(function (k) {
    var key = k.toLowerCase();
    COLUMNS.push({ key: key, label: k, get: function (p) { return p.outcomes ? p.outcomes[key] : null; },
      dir: -1, num: true, outcome: k });
  });
  COLUMNS.push({ key: "triage_recall", label: "Triage recall", dir: 1, num: true, fmt: pct,
    get: function (p) { return p.safety ? p.safety.triage.recall : null; } });
  COLUMNS.push({ key: "triage_precision", label: "Triage precision", dir: 1, num: true, fmt: pct,
    get: function (p) { return p.safety ? p.safety.triage.precision : null; } });
  COLUMNS.push({ key: "status", label: "Status", get: statusOf, dir: 1 });

  function statusOf(p) { return p.error !== null ? "failed" : (p.scored ? "scored" : "not scored"); }

  var state = { sort: "ae", dir: -1, page: 0, outcome: "", tier: "", subset: 0, search: "", rows: PAIRS };
  var haystacks = null;

  function haystack(i) {
    if (!haystacks) haystacks = new Array(PAIRS.length);
    if (haystacks[i] === undefined) {
      var p = PAIRS[i], d = p.detail;
      haystacks[i] = [p.id, p.study || "", p.modality || "", p.error || "", d.reference, d.candidate,
        d.indication || ""].concat(d.findings.map(function (f) { return f.text; })).join("\n").toLowerCase();
    }
    return haystacks[i];
  }

  function applyFilters() {
    var terms = state.search.toLowerCase().split(/\s+/).filter(Boolean);
    var o = state.outcome, t = state.tier, b = state.subset;
    var rows = [];
    for (var i = 0; i < PAIRS.length; i++) {
      var p = PAIRS[i];
      if (o === "failed") { if (p.error === null) continue; }
      else if (o || t || b) {
        var hit = false;
        for (var j = 0; j < p.sig.length && !hit; j++) {
          var s = p.sig[j];
          hit = (!o || s[0] === o) && (!t || s[1] === t) && (!b || (s[2] & b) !== 0);
        }
        if (!hit) continue;
      }
      if (terms.length) {
        var h = haystack(i), ok = true;
        for (var k = 0; k < terms.length && ok; k++) ok = h.indexOf(terms[k]) !== -1;
        if (!ok) continue;
      }
      rows.push(p);
    }
    state.rows = sortRows(rows);
    state.page = 0;
    renderTable();
  }

  function sortRows(rows) {
    var col = COLUMNS.filter(function (c) { return c.key === state.sort; })[0];
    var dir = state.dir;
    var keyed = rows.map(function (p, i) {
      var v = col.get(p);
      if (col.absSort && v !== null) v = Math.abs(v);
      return { p: p, v: v === undefined ? null : v, i: i };
    });
    keyed.sort(function (a, b) {
      if (a.v === null || b.v === null) return a.v === b.v ? a.i - b.i : (a.v === null ? 1 : -1);
      if (a.v < b.v) return -dir;
      if (a.v > b.v) return dir;
      return a.i - b.i;
    });
    return keyed.map(function (k) { return k.p; });
  }

  function renderHead() {
    $("pairs-head").replaceChildren.apply($("pairs-head"), COLUMNS.map(function (c) {
      var sorted = c.key === state.sort;
      var th = el("th", {
        class: (c.num ? "num " : "") + "sortable" + (c.outcome ? " col-" + c.key : ""),
        scope: "col", tabindex: "0", data: { col: c.key },
        "aria-sort": sorted ? (state.dir > 0 ? "ascending" : "descending") : "none",
        title: "Sort by " + c.label + (c.absSort ? " (largest difference first)" : "")
      }, c.label, el("span", { class: "arrow" }, sorted ? (state.dir > 0 ? " \u2191" : " \u2193") : ""));
      function go() {
        if (state.sort === c.key) state.dir = -state.dir;
        else { state.sort = c.key; state.dir = c.dir; }
        state.rows = sortRows(state.rows);
        state.page = 0;
        renderHead();
        renderTable();
      }
      th.addEventListener("click", go);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); } });
      return th;
    }));
  }

  function renderTable() {
    var rows = state.rows;
    var pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
    state.page = Math.min(state.page, pages - 1);
    var start = state.page * PAGE_SIZE;
    var slice = rows.slice(start, start + PAGE_SIZE);
    var body = $("pairs-body");
    body.replaceChildren.apply(body, slice.map(function (p) {
      var tr = el("tr", { data: { pairId: p.id }, class: p.error !== null ? "failed" : "" });
      COLUMNS.forEach(function (c) {
        var v = c.get(p);
        var cell;
        if (c.key === "id") {
          cell = el("td", { class: "pair-id" }, el("a", { href: pairHref(p.id) }, p.id));
        } else if (c.key === "status") {
          cell = el("td", null, el("span", { class: "status s-" + statusOf(p).replace(" ", "-"),
            title: p.error || "" }, statusOf(p)));
        } else {
          var text = c.fmt ? c.fmt(v) : num(v);
          cell = el("td", { class: (c.num ? "num" : "") + (c.outcome && v ? " has-" + c.key : "") +
            (c.key === "ae" && v ? " ae-hot" : "") + (c.key === "delta" && v ? (v > 0 ? " worse" : " better") : "") },
            text);
        }
        cell.dataset.col = c.key;
        tr.appendChild(cell);
      });
      tr.addEventListener("click", function (e) {
        if (e.target.tagName !== "A") location.hash = pairHref(p.id);
      });
      return tr;
    }));
    if (!slice.length) body.appendChild(el("tr", null, el("td", { colspan: COLUMNS.length, class: "empty" },
      "No pair matches these filters.")));
    var info = rows.length ? "Pairs " + (start + 1) + "\u2013" + (start + slice.length) + " of " + rows.length : "0 pairs";
    if (rows.length !== PAIRS.length) info += " (filtered from " + PAIRS.length + ")";
    info += " \u00B7 page " + (state.page + 1) + " / " + pages;
    $("page-info").textContent = info;
    $("pairs-panel").dataset.count = String(rows.length);
    $("pairs-panel").dataset.search = state.search;  // the search shown (the box is debounced)
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
  }

  function pairHref(id) { return "#/pair/" + encodeURIComponent(id); }

  /* The filters' choices: outcomes (errors first), significance tiers, subsets by bit. */
  function fillFilters() {
    function option(value, label) { return el("option", { value: value }, label); }
    var errorsFirst = V.error_outcomes.concat(OUTCOMES.filter(function (k) {
      return V.error_outcomes.indexOf(k) === -1;
    }));
    append($("f-outcome"), errorsFirst.map(function (k) { return option(k, k + " (" + OUTCOME_NAMES[k] + ")"); }));
    append($("f-outcome"), option("failed", "failed pairs"));
    append($("f-tier"), V.significance_tiers.map(function (tier) { return option(tier, tier); }));
    append($("f-subset"), SUBSETS.map(function (name) { return option(V.subset_bits[name], name); }));
  }

  function wireControls() {
    $("f-outcome").addEventListener("change", function (e) { state.outcome = e.target.value; applyFilters(); });
    $("f-tier").addEventListener("change", function (e) { state.tier = e.target.value; applyFilters(); });
    $("f-subset").addEventListener("change", function (e) { state.subset = Number(e.target.value) || 0; applyFilters(); });
    var timer = null;
    $("f-search").addEventListener("input", function (e) {
      clearTimeout(timer);
      timer = setTimeout(function () { state.search = e.target.value; applyFilters(); }, 120);
    });
    $("prev").addEventListener("click", function () { state.page--; renderTable(); });
    $("next").addEventListener("click", function () { state.page++; renderTable(); });
  }

  // ------------------------------------------------------------------ pair view (Fig. 3)

  function renderPair(p) {
    var d = p.detail;
    var fById = Object.create(null);
    d.findings.forEach(function (f) { fById[f.id] = f; });
    var uByIdx = Object.create(null);
    d.units.forEach(function (u) { uByIdx[u.index] = u; });
    var pos = state.rows.indexOf(p);
    var nav = el("div", { class: "pair-nav" },
      el("a", { href: "#/", class: "back" }, "\u2190 All pairs"),
      pos > 0 ? el("a", { href: pairHref(state.rows[pos - 1].id) }, "\u2039 previous") : null,
      pos >= 0 && pos < state.rows.length - 1 ? el("a", { href: pairHref(state.rows[pos + 1].id) }, "next \u203A") : null,
      pos >= 0 ? el("span", { class: "muted" }, (pos + 1) + " of " + state.rows.length + " in the list") : null);

    var meta = [p.study ? "study " + p.study : null, p.modality,
      d.judge.model ? "judge " + (d.judge.backend ? d.judge.backend + " / " : "") + d.judge.model : null,
      d.judge.fewshot_set ? "few-shot set " + d.judge.fewshot_set : null].filter(Boolean).join(" \u00B7 ");
    var head = el("div", { class: "pair-head" }, nav, el("h1", null, p.id), el("div", { class: "muted" }, meta),
      promptVersions(d.judge.prompt_version),
      scoreLine(p), d.indication ? el("p", { class: "indication" }, el("b", null, "Indication: "), d.indication) : null,
      failureBox(p),
      adjudicationBox(d),
      d.flags.length ? el("p", { class: "muted" }, "Flags: " + d.flags.join(", ")) : null);

    var fig = el("div", { class: "fig3" },
      reportColumn("Reference", "reference", d, fById, uByIdx),
      reportColumn("Candidate", "candidate", d, fById, uByIdx),
      unitsColumn(d, fById));
    var root = $("view-pair");
    root.replaceChildren(head, fig);
    if (d.repairs.length) {
      var rp = panel("Repairs of the judge's answer", "Deterministic fixes made by scoring (docs/scoring.md section 2).");
      rp.body.appendChild(el("ul", { class: "repairs" }, d.repairs.map(function (r) { return el("li", null, r); })));
      root.appendChild(rp.node);
    }
    root.dataset.pairId = p.id;
    wireLinks(root);
  }

  /* judge.prompt_version: stage -> version, one item per stage (an old record may hold one string). */
  function promptVersions(pv) {
    if (!pv) return null;
    var items = typeof pv === "object" ? Object.keys(pv).map(function (stage) { return [stage, pv[stage]]; })
      : [["all stages", String(pv)]];
    if (!items.length) return null;
    return el("div", { class: "prompts" }, el("span", { class: "muted" }, "Prompt versions: "),
      el("ul", { class: "prompt-versions" }, items.map(function (it) {
        return el("li", { data: { stage: it[0] } }, el("span", { class: "stage" }, it[0]), " ", el("code", null, it[1]));
      })));
  }

  /* A failed pair: at which stage, why, after how many attempts (record.failure). */
  function failureBox(p) {
    if (p.error === null) return null;
    var f = p.failure;
    if (!f) return el("div", { class: "error-box" }, el("b", null, "Pair not scored: "), p.error);
    var tried = f.attempts ? f.attempts + " attempt" + (f.attempts === 1 ? "" : "s") + " in " +
      Number(f.elapsed_s || 0).toFixed(1) + " s" : "none (not sent to the judge)";
    return el("div", { class: "error-box failure", id: "failure" },
      el("b", null, "Pair not scored: it failed at the " + f.stage + " stage."),
      el("dl", { class: "failure-fields" },
        el("dt", null, "Stage"), el("dd", { data: { field: "stage" } }, f.stage),
        el("dt", null, "Cause"), el("dd", { data: { field: "cause" } }, f.cause),
        el("dt", null, "Attempts"), el("dd", { data: { field: "attempts" } }, tried)));
  }

  function scoreLine(p) {
    if (!p.scored) return null;
    var o = p.outcomes, t = p.safety.triage;
    var parts = [
      significantPart(p),
      el("span", { class: "big" }, stat("pair.ae", p.ae, String(p.ae)), " actionable error" + (p.ae === 1 ? "" : "s") +
        " (RadMatch)"),
      el("span", null, o.cor + " COR, " + o.par + " PAR"),
      el("span", null, o.inc + " INC, " + o.mis + " MIS, " + o.spu + " SPU"),
      el("span", null, "triage P " + pct(t.precision) + " / R " + pct(t.recall))
    ];
    if (CMP) parts.push(el("span", { class: "cmp" }, CMP.label_b + ": " + num(p.ae_b) + " (\u0394 " + signed(p.delta) + ")"));
    var line = el("div", { class: "score-line" });
    parts.forEach(function (part, i) { if (i) line.appendChild(el("span", { class: "sep" }, "\u2022")); line.appendChild(part); });
    return line;
  }

  var ADJUDICATION_SAYS = {
    stale: "stale: the units changed since it was answered (a later scoring contract)",
    failed: "failed", invalid: "its stored answer is invalid", off: "not run"
  };

  /* The pair's significant errors, or why the adjudication gives none. */
  function significantPart(p) {
    if (p.adjudication === "current") {
      return el("span", { class: "big", id: "pair-significant" }, stat("pair.se", p.se, String(p.se)),
        " significant error" + (p.se === 1 ? "" : "s"));
    }
    return el("span", { class: "muted", id: "pair-significant", data: { state: p.adjudication } },
      "significant errors: not available (adjudication " + (ADJUDICATION_SAYS[p.adjudication] || p.adjudication) + ")");
  }

  /* A stale, failed or invalid adjudication said so; and the errors it listed that no unit holds. */
  function adjudicationBox(d) {
    var a = d.adjudication;
    if (!a) return null;
    if (a.state === "stale" || a.state === "failed" || a.state === "invalid") {
      return el("div", { class: "error-box", id: "adjudication", data: { state: a.state } },
        el("b", null, "Error adjudication " + ADJUDICATION_SAYS[a.state] + ": "),
        a.error ? a.error : "", " Significant errors are not available for this pair; its other scores stand.");
    }
    if (!a.unlisted.length) return null;
    return el("div", { class: "unlisted", id: "adjudication", data: { state: a.state } },
      el("div", { class: "lbl" }, "Significant errors that no unit holds (error adjudication)"),
      el("ul", null, a.unlisted.map(function (t) { return el("li", null, t); })));
  }

  function outcomeClass(u) { return u ? (u.outcome ? u.outcome.toLowerCase() : "generic") : "none"; }
  function marker(f, u) {
    return el("sup", { class: "idx o-" + outcomeClass(u), data: { unit: u ? u.index : "" },
      title: f.id + (u ? " \u2192 unit " + u.index + " (" + (u.outcome || "generic") + ")" : " (no unit)") },
      (u ? String(u.index) : "?") + (TRIAGE[f.significance] ? TRI : ""));
  }

  function reportColumn(title, side, d, fById, uByIdx) {
    var text = d[side];
    var spans = d.spans[side];
    var cuts = [0, text.length];
    var unquoted = (d.unquoted || {})[side] || [];
    var unquotedAt = Object.create(null);  // start offset -> end of a sentence no finding quotes
    unquoted.forEach(function (u) { cuts.push(u[0], u[1]); unquotedAt[u[0]] = u[1]; });
    var lastEnd = Object.create(null);
    spans.forEach(function (s) {
      cuts.push(s[0], s[1]);
      lastEnd[s[2]] = Math.max(lastEnd[s[2]] || 0, s[1]);
    });
    var endsAt = Object.create(null);  // offset -> findings whose last highlight ends there: their marker goes after it
    Object.keys(lastEnd).forEach(function (fid) { (endsAt[lastEnd[fid]] = endsAt[lastEnd[fid]] || []).push(fid); });
    cuts = cuts.filter(function (c, i, a) { return a.indexOf(c) === i; }).sort(function (a, b) { return a - b; });
    var box = el("div", { class: "report-text", data: { side: side } });
    for (var i = 0; i + 1 < cuts.length; i++) {
      var a = cuts[i], b = cuts[i + 1];
      var seg = text.slice(a, b);
      var cover = spans.filter(function (s) { return s[0] <= a && s[1] >= b; });
      if (!cover.length && unquotedAt[a] === b) {
        box.appendChild(el("span", { class: "unquoted", title: "No finding quotes this sentence: extraction may have missed something" }, seg));
      } else if (!cover.length) { box.appendChild(document.createTextNode(visible(seg))); }
      else {
        cover.sort(function (x, y) { return (x[1] - x[0]) - (y[1] - y[0]); });
        var f = fById[cover[0][2]], u = uByIdx[f.unit];
        box.appendChild(el("mark", { class: "hl o-" + outcomeClass(u), data: { unit: u ? u.index : "", fid: f.id },
          title: cover.map(function (s) { return s[2] + ": " + fById[s[2]].text; }).join("\n") }, seg));
      }
      (endsAt[b] || []).forEach(function (fid) { box.appendChild(marker(fById[fid], uByIdx[fById[fid].unit])); });
    }
    var unlocated = d.findings.filter(function (f) { return f.side === side && !f.located; });
    return el("section", { class: "report " + side },
      el("h3", null, title, el("span", { class: "count" }, d.findings.filter(function (f) { return f.side === side; }).length + " findings")),
      box,
      unquoted.length ? el("div", { class: "nq-legend", data: { count: unquoted.length } },
        el("span", { class: "unquoted sample" }, "sentence"), " " + unquoted.length + " sentence" +
        (unquoted.length === 1 ? "" : "s") + " that no finding quotes: where extraction may have missed something.") : null,
      unlocated.length ? el("div", { class: "unlocated" }, el("div", { class: "muted small" },
        "Evidence not found in the text:"), el("ul", null, unlocated.map(function (f) {
          return el("li", null, marker(f, uByIdx[f.unit]), " ", f.text);
        }))) : null);
  }

  function findingLine(f, u) {
    if (!f) return null;
    var attrs = [f.status, f.significance, f.comparison].filter(Boolean);
    f.measurements.forEach(function (m) {
      attrs.push((m.prior ? "prior " : "") + m.value + (m.unit ? " " + m.unit : "") + " (" + m.category +
        (m.quantity ? ", " + m.quantity.replace(/_/g, " ") : "") + ")");
    });
    return el("li", null, el("code", null, f.id), marker(f, u), " ", f.text,
      el("span", { class: "attrs" }, attrs.join(" \u00B7 ")));
  }

  function unitsColumn(d, fById) {
        var legend = el("div", { class: "legend" }, OUTCOMES.concat(["generic"]).map(function (k) {
      return el("span", null, pill(k === "generic" ? null : k), " " + OUTCOME_NAMES[k].split(" ")[0]);
    }), el("span", null, TRI + " triage tier (" + V.safety_tiers.triage.join("/") + ")"));
    var cards = d.units.map(function (u) {
      var errs = u.errors.length ? el("table", { class: "errors" },
        el("thead", null, el("tr", null, el("th", null, "dimension"), el("th", null, "severity"),
          el("th", null, "source"), el("th", null, "row"), el("th", null, "reasoning"))),
        el("tbody", null, u.errors.map(function (e) {
          return el("tr", null, el("td", null, e.dimension), el("td", null, el("span", { class: "sev sev-" + e.severity }, e.severity)),
            el("td", null, e.source), el("td", { class: "small" }, e.pred_id || e.gt_id ? (e.pred_id || "\u2014") + " \u2194 " + (e.gt_id || "\u2014") : "pooled"),
            el("td", null, e.reasoning));
        }))) : (u.kind === "matched" ? el("p", { class: "muted small" }, "No errors.") : null);
      var rows = u.rows.map(function (r) {
        var why = u.reasons[r.pred_id + "|" + r.gt_id];
        return el("li", null, el("code", null, r.pred_id + " \u2194 " + r.gt_id), " " + r.match_scope,
          why ? el("span", { class: "why" }, ": " + why) : null);
      });
      return el("article", { class: "unit o-" + outcomeClass(u), id: "unit-" + u.index, data: { unit: u.index } },
        el("header", null, el("span", { class: "idx-badge o-" + outcomeClass(u) }, String(u.index)), pill(u.outcome),
          el("span", { class: "tier" + (TRIAGE[u.tier] ? " triage" : "") }, u.tier + (TRIAGE[u.tier] ? " " + TRI : "")),
          el("span", { class: "kind" }, u.kind),
          u.significant_errors === null || u.significant_errors === undefined ? null :
            el("span", { class: "adjudicated", title: "The error adjudication's count for this unit, judged in context" },
              u.significant_errors + " significant error" + (u.significant_errors === 1 ? "" : "s")),
          u.actionable ? el("span", { class: "actionable" }, "actionable error") :
            u.unaddressed_negative ? el("span", { class: "negative-note", title: "A negative the " +
              "reference does not address: spurious, but it contradicts nothing, so it is not an actionable error." },
              "unaddressed negative, not an error") : null),
        u.gt_ids.length ? el("div", { class: "side" }, el("div", { class: "lbl" }, "Reference"),
          el("ul", null, u.gt_ids.map(function (id) { return findingLine(fById[id], u); }))) : null,
        u.pred_ids.length ? el("div", { class: "side" }, el("div", { class: "lbl" }, "Candidate"),
          el("ul", null, u.pred_ids.map(function (id) { return findingLine(fById[id], u); }))) : null,
        u.adjudication_reasoning ? el("p", { class: "adjudication-reasoning" },
          el("span", { class: "lbl" }, "Adjudication: "), u.adjudication_reasoning) : null,
        errs,
        rows.length ? el("div", { class: "rows" }, el("div", { class: "lbl" }, "Match rows"), el("ul", null, rows)) : null,
        u.repairs.length ? el("div", { class: "unit-repairs" }, el("div", { class: "lbl" }, "Repairs"),
          el("ul", null, u.repairs.map(function (r) { return el("li", null, r); }))) : null);
    });
    return el("section", { class: "units" },
      el("h3", null, "Units", el("span", { class: "count" }, d.units.length + " units")), legend,
      cards.length ? cards : el("p", { class: "muted" }, "No units (pair not scored)."));
  }

  /* Hovering a unit card or highlight lights up everything of that unit; clicking a
   * highlight scrolls to its unit card. */
  function wireLinks(root) {
    function mark(idx, on) {
      if (!idx) return;
      root.querySelectorAll('[data-unit="' + CSS.escape(idx) + '"]').forEach(function (n) { n.classList.toggle("focus", on); });
    }
    root.addEventListener("mouseover", function (e) {
      var t = e.target.closest("[data-unit]");
      if (t) mark(t.dataset.unit, true);
    });
    root.addEventListener("mouseout", function (e) {
      var t = e.target.closest("[data-unit]");
      if (t) mark(t.dataset.unit, false);
    });
    root.addEventListener("click", function (e) {
      var t = e.target.closest("mark[data-unit], sup[data-unit]");
      if (!t || !t.dataset.unit) return;
      var card = document.getElementById("unit-" + t.dataset.unit);
      if (card) {
        card.scrollIntoView({ block: "nearest", behavior: "smooth" });
        card.classList.remove("flash"); void card.offsetWidth; card.classList.add("flash");
      }
    });
  }

  // ------------------------------------------------------------------ routing

  var byId = Object.create(null);
  PAIRS.forEach(function (p) { byId[p.id] = p; });
  var listScroll = 0;

  function route() {
    var h = location.hash;
    var pairView = $("view-pair"), corpusView = $("view-corpus");
    if (h.indexOf("#/pair/") === 0) {
      var id;
      try { id = decodeURIComponent(h.slice(7)); } catch (err) { id = null; }
      var p = id !== null ? byId[id] : undefined;
      if (p) {
        if (!corpusView.hidden) listScroll = window.scrollY;
        renderPair(p);
        corpusView.hidden = true;
        pairView.hidden = false;
        document.documentElement.dataset.view = "pair";
        window.scrollTo(0, 0);
        return;
      }
    }
    pairView.hidden = true;
    corpusView.hidden = false;
    document.documentElement.dataset.view = "corpus";
    window.scrollTo(0, listScroll);
  }

  // ------------------------------------------------------------------ start

  $("source").textContent = DATA.source + (CMP ? " vs " + CMP.label_b : "") + " \u00B7 " + DATA.generated;
  renderCorpus();
  renderCompare();
  renderHead();
  fillFilters();
  wireControls();
  applyFilters();
  window.addEventListener("hashchange", route);
  route();
  document.documentElement.dataset.ready = "1";
})();
