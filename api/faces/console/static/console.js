// memstream console (docs/console.md). Plain browser JavaScript, no build step, no dependency:
// every view is built with DOM calls, and every value from the server goes in as text
// (textContent / attribute values), never as markup, since memories hold whatever agents wrote.
"use strict";

(function () {
  const CSRF_META = document.querySelector('meta[name="memstream-csrf"]');
  const CSRF = CSRF_META ? CSRF_META.getAttribute("content") : null;
  const EVENT_TYPES = [
    "memory.stored", "memory.updated", "memory.deleted", "memory.locked", "memory.unlocked",
    "memory.reembedded", "embedding.switched", "memory.verified", "episode.archived", "episode.deleted",
    "profile.updated", "associations.declared", "associations.retracted", "standing.declared",
    "recall_precision.set", "agent_data.deleted", "record.erased", "agent.erased",
  ];
  const view = document.getElementById("view");
  let asOf = null; // null: now; a number: a log offset; a string: an ISO-8601 instant
  let rendering = 0; // the render generation: a slow answer for an older view is dropped

  // -- DOM ---------------------------------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "on") for (const [ev, fn] of Object.entries(value)) el.addEventListener(ev, fn);
      else if (key === "class") el.className = value;
      else el.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "on") for (const [ev, fn] of Object.entries(value)) el.addEventListener(ev, fn);
      else el.setAttribute(key, String(value));
    }
    for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return el;
  }

  function show(...nodes) {
    view.replaceChildren(...nodes.flat().filter((n) => n));
  }

  function errorBox(err) {
    return h("p", { class: "err" }, `Error: ${err && err.message ? err.message : err}`);
  }

  function json(value) {
    return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
  }

  // -- the API -------------------------------------------------------------------------------------

  class ToolError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  async function tool(name, args) {
    const headers = { "content-type": "application/json" };
    if (CSRF) headers["x-csrf-token"] = CSRF; // ACL mode: the session cookie plus its CSRF token
    else headers["x-client-id"] = "console";
    const r = await fetch(`/v1/tools/${encodeURIComponent(name)}`, {
      method: "POST", headers, body: JSON.stringify(args), credentials: "same-origin",
    });
    if (r.status === 401) {
      location.assign("/console/login");
      throw new ToolError("not signed in", 401);
    }
    let body;
    try {
      body = await r.json();
    } catch (e) {
      throw new ToolError(`${name}: HTTP ${r.status}`, r.status);
    }
    if (body && body.ok === false) throw new ToolError(`${name}: ${body.error || body.reason || "refused"}`, r.status);
    return body;
  }

  function withAsOf(args) {
    return asOf === null ? args : { ...args, as_of: asOf };
  }

  // -- routing: #/path?as_of=... -------------------------------------------------------------------

  function parseHash() {
    const raw = location.hash.replace(/^#/, "") || "/";
    const [path, query] = raw.split("?", 2);
    const params = new URLSearchParams(query || "");
    return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params };
  }

  function parseAsOf(text) {
    const t = (text || "").trim();
    if (!t) return null;
    return /^\d+$/.test(t) ? Number(t) : t;
  }

  function href(...parts) {
    const path = "#/" + parts.map((p) => encodeURIComponent(p)).join("/");
    return asOf === null ? path : `${path}?as_of=${encodeURIComponent(String(asOf))}`;
  }

  function link(text, ...parts) {
    return h("a", { href: href(...parts) }, text);
  }

  function asOfNote() {
    return asOf === null ? null : h("span", { class: "asof-note" }, `as of ${asOf}`);
  }

  async function route() {
    const { parts, params } = parseHash();
    asOf = parseAsOf(params.get("as_of"));
    document.getElementById("asof-input").value = asOf === null ? "" : String(asOf);
    // The header's links keep the chosen point in time.
    for (const a of document.querySelectorAll("header nav a, header a.brand")) {
      a.setAttribute("href", a.id === "nav-audit" ? href("audit") : href());
    }
    const generation = ++rendering;
    const stale = () => generation !== rendering;
    try {
      if (parts.length === 0) await agentsView(stale);
      else if (parts[0] === "agent" && parts[1] !== undefined) await agentView(parts[1], params, stale);
      else if (parts[0] === "memory" && parts[1]) await memoryView(parts[1], stale);
      else if (parts[0] === "graph" && parts[1] !== undefined) await graphView(parts[1], stale);
      else if (parts[0] === "audit") await auditView(params, stale);
      else show(h("h1", {}, "Not found"), h("p", {}, link("Back to the agents", "")));
    } catch (err) {
      if (!stale()) show(h("h1", {}, "Could not load this view"), errorBox(err));
    }
  }

  // -- agents ----------------------------------------------------------------------------------------

  async function agentsView(stale) {
    const body = await tool("list_agents", withAsOf({ limit: 10000 }));
    if (stale()) return;
    const filter = h("input", { type: "search", placeholder: "filter by id", id: "agent-filter" });
    const rows = body.agents.map((a) =>
      h("tr", { "data-agent": a.agent_id },
        h("td", {}, link(a.agent_id || "(empty id)", "agent", a.agent_id)),
        h("td", { class: "num" }, a.memories),
        h("td", { class: "num" }, a.episodes),
        h("td", {}, a.profile ? "yes" : ""),
        h("td", {}, a.last_event ? a.last_event.at : "—"),
        h("td", { class: "num" }, a.last_event ? a.last_event.offset : ""),
        h("td", {}, a.last_event ? a.last_event.type : ""),
        h("td", {}, link("graph", "graph", a.agent_id), " · ", h("a", { href: `#/audit?agent=${encodeURIComponent(a.agent_id)}` }, "audit"))));
    const tbody = h("tbody", {}, rows);
    filter.addEventListener("input", () => {
      const needle = filter.value.toLowerCase();
      for (const tr of tbody.children) tr.hidden = !tr.getAttribute("data-agent").toLowerCase().includes(needle);
    });
    show(
      h("h1", {}, "Agents", asOfNote()),
      h("p", { class: "muted" }, `${body.count} agent(s)${body.more ? " (more not shown)" : ""}; last activity is the newest event on a live record.`),
      h("form", { class: "inline", on: { submit: (e) => e.preventDefault() } }, filter),
      body.agents.length === 0 ? h("p", { class: "muted", id: "no-agents" }, "No agents yet.") :
        h("table", { id: "agents" },
          h("thead", {}, h("tr", {}, ["Agent", "Memories", "Episodes", "Profile", "Last activity", "Offset", "Event", ""].map((t) => h("th", {}, t)))),
          tbody));
  }

  // -- one agent: search and recent memories -----------------------------------------------------------

  function reasonChips(msg) {
    const chips = [];
    const r = msg.match_reason;
    if (r) {
      chips.push(h("span", { class: "chip signal" }, `matched by ${r.signal}`));
      chips.push(h("span", { class: "chip" }, `score ${fmt(r.score)}`));
      for (const key of ["cosine", "rrf", "rsf", "prior"]) if (r[key] !== undefined) chips.push(h("span", { class: "chip" }, `${key} ${fmt(r[key])}`));
    } else {
      chips.push(h("span", { class: "chip" }, "unscored (filled in)"));
    }
    if (msg.confidence !== undefined) chips.push(h("span", { class: "chip" }, `confidence ${fmt(msg.confidence)}`));
    if (msg.standing) {
      const standing = typeof msg.standing === "string" ? msg.standing : msg.standing.standing || JSON.stringify(msg.standing);
      chips.push(h("span", { class: "chip standing" }, `standing: ${standing}`));
    }
    return h("div", { class: "reason" }, chips);
  }

  function fmt(x) {
    return typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(4)) : String(x);
  }

  async function agentView(agent, params, stale) {
    const query = params.get("q") || "";
    const input = h("input", { type: "search", name: "q", value: query, size: 50, placeholder: "what to recall", id: "recall-query" });
    const form = h("form", { class: "inline", id: "recall-form", on: { submit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      if (input.value) q.set("q", input.value);
      if (asOf !== null) q.set("as_of", String(asOf));
      location.hash = `#/agent/${encodeURIComponent(agent)}${q.toString() ? "?" + q : ""}`;
    } } }, input, h("button", { type: "submit" }, "Recall"));
    const head = [
      h("h1", {}, `Agent ${agent}`, asOfNote()),
      h("div", { class: "tabs" }, link("Association graph", "graph", agent), h("a", { href: `#/audit?agent=${encodeURIComponent(agent)}` }, "Audit trail"), link("All agents", "")),
      form,
    ];
    const [recalled, recent, episodes] = await Promise.all([
      query ? tool("recall", withAsOf({ agent_id: agent, query, limit: 20 })) : Promise.resolve(null),
      tool("list_memories", withAsOf({ agent_id: agent, limit: 100 })),
      tool("list_episodes", withAsOf({ agent_id: agent, limit: 50 })),
    ]);
    if (stale()) return;
    const sections = [];
    if (recalled) {
      const best = [...recalled.messages].reverse(); // recall answers best last
      sections.push(h("h2", {}, `Recall: ${best.length} result(s), best first`));
      sections.push(h("div", { id: "recall-results" }, best.map((m) =>
        h("div", { class: "card result" },
          h("div", { class: "head" }, m.ref ? link(m.ref, "memory", m.ref) : h("span", {}, "profile"), h("span", {}, m.timestamp || "")),
          h("div", { class: "content" }, m.content),
          reasonChips(m)))));
      if (recalled.gate_fallback) sections.push(h("p", { class: "muted" }, "Nothing passed the relevance gate: these are the nearest rows."));
    }
    sections.push(h("h2", {}, `Memories (${recent.count}, newest first)`));
    sections.push(recent.memories.length === 0 ? h("p", { class: "muted" }, "No memories.") :
      h("div", { id: "memories" }, recent.memories.map((m) =>
        h("div", { class: "card memory", "data-ref": `mem:${m.id}` },
          h("div", { class: "head" }, link(`mem:${m.id}`, "memory", `mem:${m.id}`), h("span", {}, m.created_at || ""),
            m.locked ? h("span", { class: "chip locked" }, "locked") : null,
            m.project_id ? h("span", {}, `project ${m.project_id}`) : null, m.channel ? h("span", {}, `channel ${m.channel}`) : null),
          h("div", { class: "content" }, m.content)))));
    if (episodes.episodes.length) {
      sections.push(h("h2", {}, `Episodes (${episodes.count}, newest first)`));
      sections.push(h("div", { id: "episodes" }, episodes.episodes.map((e) =>
        h("div", { class: "card episode" },
          h("div", { class: "head" }, link(`ep:${e.id}`, "memory", `ep:${e.id}`), h("span", {}, e.start_time || e.created_at || ""),
            e.keywords ? h("span", {}, `keywords ${e.keywords}`) : null),
          h("div", { class: "content" }, e.summary)))));
    }
    show(head, sections);
  }

  // -- one memory: versions as diffs, who changed what, standings, associations ---------------------------

  function tokens(text) {
    return text.split(/(\s+)/).filter((t) => t.length > 0);
  }

  // A word-level diff of two texts (longest common subsequence): [["=", text] | ["+", text] | ["-", text]].
  function diffWords(before, after) {
    const a = tokens(before), b = tokens(after);
    if (a.length * b.length > 4000000) return [["-", before], ["+", after]];
    const n = a.length, m = b.length;
    const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    const out = [];
    const push = (op, t) => {
      if (out.length && out[out.length - 1][0] === op) out[out.length - 1][1] += t;
      else out.push([op, t]);
    };
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (a[i] === b[j]) { push("=", a[i]); i++; j++; }
      else if (lcs[i + 1][j] >= lcs[i][j + 1]) push("-", a[i++]);
      else push("+", b[j++]);
    }
    while (i < n) push("-", a[i++]);
    while (j < m) push("+", b[j++]);
    return grouped(out);
  }

  // Whitespace kept between two changes joins them, so "Friday afternoon" -> "Monday morning"
  // reads as one deletion and one insertion instead of word by word.
  function grouped(ops) {
    const out = [];
    let del = "", ins = "";
    const flush = () => {
      if (del) out.push(["-", del]);
      if (ins) out.push(["+", ins]);
      del = ""; ins = "";
    };
    ops.forEach(([op, t], k) => {
      const between = op === "=" && /^\s+$/.test(t) && (del || ins) && k + 1 < ops.length && ops[k + 1][0] !== "=";
      if (op === "-" || between) del += t;
      if (op === "+" || between) ins += t;
      if (op === "=" && !between) { flush(); out.push([op, t]); }
    });
    flush();
    return out;
  }

  function diffNode(before, after) {
    return h("div", { class: "diff" }, diffWords(before, after).map(([op, t]) => op === "=" ? t : h(op === "+" ? "ins" : "del", {}, t)));
  }

  function atOrBefore(ev) {
    if (asOf === null) return true;
    if (typeof asOf === "number") return ev.offset <= asOf;
    const point = Date.parse(asOf);
    return Number.isNaN(point) ? true : Date.parse(ev.at) <= point;
  }

  function who(actor) {
    const parts = [`client ${actor.client_id || "?"}`];
    if (actor.agent_id) parts.push(`agent ${actor.agent_id}`);
    if (actor.session_id) parts.push(`session ${actor.session_id}`);
    return parts.join(", ");
  }

  async function memoryView(ref, stale) {
    const hist = await tool("history", { ref, limit: 10000 });
    const all = hist.events;
    const events = all.filter(atOrBefore);
    const owner = all.length ? all[0].scope.agent_id : "";
    const [now, graph] = await Promise.all([
      tool("get_contents", withAsOf({ agent_id: owner, refs: [hist.ref] })),
      tool("association_graph", withAsOf({ agent_id: owner })).catch(() => null),
    ]);
    if (stale()) return;
    const versions = events.filter((e) => typeof e.change.content === "string" && (e.type === "memory.stored" || e.type === "memory.updated"));
    const versionNodes = versions.map((e, k) => h("div", { class: "card version", "data-offset": e.offset },
      h("div", { class: "head" }, h("b", {}, `version ${k + 1}`), h("span", {}, e.type), h("span", {}, e.at),
        h("span", {}, who(e.actor)), h("span", {}, `offset ${e.offset}`)),
      k === 0 ? h("div", { class: "diff" }, h("ins", {}, e.change.content)) : diffNode(versions[k - 1].change.content, e.change.content)));
    const eventRows = events.map((e) => h("tr", {},
      h("td", {}, e.type), h("td", {}, e.at), h("td", {}, who(e.actor)), h("td", { class: "num" }, e.offset),
      h("td", {}, e.command_id), h("td", {}, summarize(e))));
    const standings = events.filter((e) => e.type === "standing.declared");
    const item = now.items && now.items[0];
    const mentionedBy = graph ? graph.entities.filter((e) => (e.mentions || []).includes(hist.ref)) : [];
    const names = graph ? Object.fromEntries(graph.entities.map((e) => [e.id, e.name])) : {};
    const endName = (node) => node.entity !== undefined ? (names[node.entity] || `entity ${node.entity}`) : node.ref;
    const relations = graph ? graph.relations.filter((r) => r.subject.ref === hist.ref || r.object.ref === hist.ref) : [];
    show(
      h("h1", {}, `Memory ${hist.ref}`, asOfNote()),
      h("p", { class: "muted" }, "Owned by agent ", owner ? link(owner, "agent", owner) : "?", `: ${events.length} event(s)`,
        asOf !== null && events.length < all.length ? `, ${all.length - events.length} later one(s) hidden` : "", "."),
      h("h2", {}, asOf === null ? "Now" : `At ${asOf}`),
      item ? h("div", { class: "card", id: "current" }, h("div", { class: "content" }, item.content)) :
        h("p", { class: "muted", id: "current" }, asOf === null ? "Deleted (or not readable)." : "Not present at this point."),
      h("h2", {}, `Versions (${versions.length})`),
      h("div", { id: "versions" }, versionNodes),
      h("h2", {}, "Standings"),
      standings.length === 0 ? h("p", { class: "muted" }, "None declared.") : h("ul", { id: "standings" }, standings.map((e) =>
        h("li", {}, h("b", {}, e.change.standing), e.change.note ? ` — ${e.change.note}` : "", ` (${e.at}, ${who(e.actor)}, offset ${e.offset})`))),
      h("h2", {}, "Associations"),
      mentionedBy.length === 0 && relations.length === 0 ? h("p", { class: "muted" }, "None declared.") :
        h("ul", { id: "associations" },
          mentionedBy.map((e) => h("li", {}, "mentions ", h("b", {}, e.name), e.aliases ? ` (also ${e.aliases.join(", ")})` : "")),
          relations.map((r) => h("li", {}, relationEnd(r.subject, endName), ` ${r.predicate} `, relationEnd(r.object, endName)))),
      owner ? h("p", {}, link("Open the agent's graph", "graph", owner)) : null,
      h("h2", {}, "Who changed what, when"),
      h("table", { id: "events" }, h("thead", {}, h("tr", {}, ["Event", "At", "Who", "Offset", "Command", "Change"].map((t) => h("th", {}, t)))),
        h("tbody", {}, eventRows)));
  }

  function relationEnd(node, endName) {
    return node.ref ? link(node.ref, "memory", node.ref) : h("b", {}, endName(node));
  }

  function summarize(e) {
    const c = { ...e.change };
    delete c.content;
    delete c.embedding;
    delete c.id;
    const keys = Object.keys(c);
    return keys.length === 0 ? "" : JSON.stringify(c).slice(0, 300);
  }

  // -- the association graph ------------------------------------------------------------------------------

  // A small force-directed layout: springs along edges, repulsion between every pair, a pull to the
  // centre; deterministic (nodes start on a circle), a fixed number of steps.
  function layout(nodes, edges, width, height) {
    const n = nodes.length;
    nodes.forEach((node, k) => {
      const angle = (2 * Math.PI * k) / Math.max(n, 1);
      node.x = width / 2 + (width / 3) * Math.cos(angle);
      node.y = height / 2 + (height / 3) * Math.sin(angle);
    });
    const ideal = Math.max(40, Math.min(140, Math.sqrt((width * height) / Math.max(n, 1)) * 0.8));
    for (let step = 0; step < 300; step++) {
      const heat = 1 - step / 300;
      for (const a of nodes) { a.dx = (width / 2 - a.x) * 0.01; a.dy = (height / 2 - a.y) * 0.01; }
      for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) {
        const a = nodes[i], b = nodes[j];
        let dx = a.x - b.x, dy = a.y - b.y;
        let d2 = dx * dx + dy * dy;
        if (d2 < 0.01) { dx = 0.1 * (i - j); dy = 0.1; d2 = dx * dx + dy * dy; }
        const f = (ideal * ideal) / d2;
        a.dx += dx * f * 0.05; a.dy += dy * f * 0.05; b.dx -= dx * f * 0.05; b.dy -= dy * f * 0.05;
      }
      for (const e of edges) {
        const a = e.source, b = e.target;
        const dx = b.x - a.x, dy = b.y - a.y;
        const d = Math.sqrt(dx * dx + dy * dy) || 1;
        const f = ((d - ideal) / d) * 0.08;
        a.dx += dx * f; a.dy += dy * f; b.dx -= dx * f; b.dy -= dy * f;
      }
      for (const a of nodes) {
        const len = Math.sqrt(a.dx * a.dx + a.dy * a.dy) || 1;
        const cap = Math.min(len, 20 * heat + 1);
        a.x = Math.min(width - 30, Math.max(30, a.x + (a.dx / len) * cap));
        a.y = Math.min(height - 20, Math.max(20, a.y + (a.dy / len) * cap));
      }
    }
    // Fill the drawing: scale the layout's extent to the box (at most 2.5x), centred, with room
    // on the right for the labels.
    if (n === 0) return;
    const xs = nodes.map((a) => a.x), ys = nodes.map((a) => a.y);
    const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const margin = 40, labels = 220;
    const scale = Math.min((width - margin - labels) / Math.max(x1 - x0, 1), (height - 2 * margin) / Math.max(y1 - y0, 1), 2.5);
    const left = (width - labels - (x1 - x0) * scale) / 2, cy = (y0 + y1) / 2;
    for (const a of nodes) {
      a.x = left + (a.x - x0) * scale;
      a.y = height / 2 + (a.y - cy) * scale;
    }
  }

  function short(text, n) {
    return text.length > n ? text.slice(0, n - 1) + "…" : text;
  }

  async function graphView(agent, stale) {
    const g = await tool("association_graph", withAsOf({ agent_id: agent, limit: 300 }));
    if (stale()) return;
    const nodes = [];
    const byKey = new Map();
    const add = (key, node) => { if (!byKey.has(key)) { byKey.set(key, node); nodes.push(node); } return byKey.get(key); };
    for (const e of g.entities) add(`e${e.id}`, { kind: "entity", key: `e${e.id}`, label: e.name, entity: e });
    for (const [ref, preview] of Object.entries(g.records)) add(ref, { kind: "record", key: ref, label: ref, preview });
    const edges = [];
    for (const e of g.entities) for (const ref of e.mentions || []) if (byKey.has(ref)) edges.push({ source: byKey.get(`e${e.id}`), target: byKey.get(ref), mention: true, label: "" });
    const keyOf = (node) => node.entity !== undefined ? `e${node.entity}` : node.ref;
    for (const r of g.relations) {
      const a = byKey.get(keyOf(r.subject)), b = byKey.get(keyOf(r.object));
      if (a && b) edges.push({ source: a, target: b, mention: false, label: r.predicate });
    }
    const width = 900, height = 620;
    layout(nodes, edges, width, height);
    const detail = h("div", { class: "card", id: "graph-detail" }, h("p", { class: "muted" }, "Click an entity to see its mentions; click a record to open it."));
    const svg = s("svg", { class: "graph", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `association graph of ${agent}` });
    for (const e of edges) {
      svg.append(s("line", { class: e.mention ? "edge mention" : "edge", x1: e.source.x, y1: e.source.y, x2: e.target.x, y2: e.target.y }));
      if (e.label) svg.append(s("text", { class: "edge-label", x: (e.source.x + e.target.x) / 2, y: (e.source.y + e.target.y) / 2 - 3, "text-anchor": "middle" }, e.label));
    }
    for (const node of nodes) {
      const group = s("g", { class: `node ${node.kind}`, "data-key": node.key, transform: `translate(${node.x},${node.y})`, tabindex: 0 });
      group.append(s("title", {}, node.kind === "record" ? `${node.key}: ${node.preview}` : node.label));
      if (node.kind === "entity") group.append(s("circle", { r: 11 }));
      else group.append(s("rect", { x: -8, y: -8, width: 16, height: 16, rx: 3 }));
      group.append(s("text", { x: 14, y: 4 }, short(node.kind === "record" ? `${node.key} ${node.preview}` : node.label, 36)));
      group.addEventListener("click", () => {
        if (node.kind === "record") { location.hash = href("memory", node.key); return; }
        for (const el of svg.querySelectorAll(".node.selected")) el.classList.remove("selected");
        group.classList.add("selected");
        const e = node.entity;
        detail.replaceChildren(h("h2", {}, e.name), e.aliases ? h("p", {}, `Also: ${e.aliases.join(", ")}`) : null,
          h("p", { class: "muted" }, `Declared ${e.created_at}`),
          (e.mentions || []).length === 0 ? h("p", { class: "muted" }, "No live record mentions it.") :
            h("ul", {}, e.mentions.map((ref) => h("li", {}, link(ref, "memory", ref), " ", g.records[ref] || ""))));
      });
      svg.append(group);
    }
    show(
      h("h1", {}, `Association graph of ${agent}`, asOfNote()),
      h("p", { class: "muted" }, `${g.entities.length} entities, ${Object.keys(g.records).length} records, ${g.relations.length} relations`,
        g.entities_omitted ? ` (${g.entities_omitted} more entities not drawn)` : "", ". ", link("Back to the agent", "agent", agent)),
      h("p", { class: "legend" }, "● entity   ■ record   — relation   - - mention"),
      nodes.length === 0 ? h("p", { class: "muted", id: "graph-empty" }, "Nothing declared yet.") : h("div", { class: "graph-wrap" }, svg, detail));
  }

  // -- the audit trail ------------------------------------------------------------------------------------

  async function auditView(params, stale) {
    const kind = params.get("kind") || "all";
    const agent = params.get("agent") || "";
    const text = params.get("text") || "";
    const kindSel = h("select", { name: "kind", id: "audit-kind" }, ["all", "refused", "skipped"].map((k) => h("option", { value: k, selected: k === kind }, k)));
    const agentIn = h("input", { type: "text", name: "agent", value: agent, placeholder: "agent (all)", id: "audit-agent" });
    const textIn = h("input", { type: "search", name: "text", value: text, placeholder: "text in tool, client, why or request", size: 32, id: "audit-text" });
    const form = h("form", { class: "inline", id: "audit-form", on: { submit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      q.set("kind", kindSel.value);
      if (agentIn.value) q.set("agent", agentIn.value);
      if (textIn.value) q.set("text", textIn.value);
      if (asOf !== null) q.set("as_of", String(asOf));
      location.hash = `#/audit?${q}`;
    } } }, h("label", {}, "Kind ", kindSel), h("label", {}, "Agent ", agentIn), h("label", {}, "Text ", textIn), h("button", { type: "submit" }, "Filter"));
    const args = { kind, limit: 1000 };
    if (agent) args.agent_id = agent;
    let body;
    try {
      body = await tool("audit_log", args);
    } catch (err) {
      if (stale()) return;
      // Every agent's trail at once needs read on every agent (and, in Kafka mode, an agent).
      const hint = agent ? null : h("p", { class: "muted" }, "Name an agent to see its trail.");
      return show(h("h1", {}, "Audit trail"), form, errorBox(err), hint);
    }
    if (stale()) return;
    const needle = text.toLowerCase();
    const records = body.records.filter(atOrBeforeAudit).filter((r) => !needle ||
      [r.tool, r.why, r.who && r.who.client_id, r.scope && r.scope.agent_id, JSON.stringify(r.request)].join(" ").toLowerCase().includes(needle));
    records.reverse(); // newest first
    show(
      h("h1", {}, "Audit trail", asOfNote()),
      h("p", { class: "muted" }, "Commands refused or skipped, newest first: who, what, why."),
      form,
      h("p", { class: "muted", id: "audit-count" }, `${records.length} record(s)`),
      records.length === 0 ? h("p", { class: "muted" }, "Nothing recorded.") :
        h("table", { id: "audit" }, h("thead", {}, h("tr", {}, ["At", "Kind", "Tool", "Who", "Agent", "Why", "Request"].map((t) => h("th", {}, t)))),
          h("tbody", {}, records.map((r) => h("tr", { class: `audit-row kind-row-${r.kind}` },
            h("td", {}, r.at), h("td", { class: `kind-${r.kind}` }, r.kind), h("td", {}, r.tool), h("td", {}, who(r.who || {})),
            h("td", {}, r.scope && r.scope.agent_id && r.scope.agent_id !== "-" ? link(r.scope.agent_id, "agent", r.scope.agent_id) : "—"),
            h("td", {}, r.why || ""), h("td", {}, json(r.request || {})))))));
  }

  function atOrBeforeAudit(r) {
    if (asOf === null || typeof asOf === "number") return true; // audit offsets are not event offsets
    const point = Date.parse(asOf);
    return Number.isNaN(point) ? true : Date.parse(r.at) <= point;
  }

  // -- live updates: the change feed (GET /v1/events) ---------------------------------------------------

  const liveBadge = document.getElementById("live");
  const feedList = document.getElementById("feed-list");
  let source = null;
  let retryMs = 1000;
  let reconnecting = false; // the last stream was closed for good: the next one is a fresh start
  let refreshTimer = null;
  const touched = new Set(); // agents and records the events since the last reload touched

  function setLive(on, text) {
    liveBadge.textContent = text;
    liveBadge.className = on ? "live on" : "live off";
  }

  function onEvent(msg) {
    let ev;
    try { ev = JSON.parse(msg.data); } catch (e) { return; }
    retryMs = 1000;
    const agent = ev.scope ? ev.scope.agent_id : "";
    const ref = ev.change && ev.change.id !== undefined && /^(memory|episode)\./.test(ev.type) ? `${ev.type.startsWith("episode.") ? "ep" : "mem"}:${ev.change.id}` : null;
    const preview = ev.change && typeof ev.change.content === "string" ? short(ev.change.content, 80) : "";
    feedList.prepend(h("li", { class: "feed-item", "data-offset": ev.offset },
      h("div", {}, h("span", { class: "what" }, ev.type), " ", agent ? link(agent, "agent", agent) : null),
      h("div", { class: "muted" }, `${ev.at} · ${who(ev.actor || {})} · offset ${ev.offset}`),
      ref ? h("div", {}, link(ref, "memory", ref), " ", preview) : preview ? h("div", {}, preview) : null));
    while (feedList.children.length > 200) feedList.lastChild.remove();
    if (asOf === null) { // a view of "now" follows the feed; a view of the past stays put
      touched.add(`agent:${agent}`);
      if (ref) touched.add(`ref:${ref}`);
      // At most one reload per half second however fast events come (a busy fleet must not
      // keep the view from ever reloading).
      if (refreshTimer === null) refreshTimer = setTimeout(refreshIfShown, 500);
    }
  }

  function refreshIfShown() {
    refreshTimer = null;
    const { parts } = parseHash();
    const shown = parts.length === 0 || ((parts[0] === "agent" || parts[0] === "graph") && touched.has(`agent:${parts[1]}`)) ||
      (parts[0] === "memory" && touched.has(`ref:${parts[1]}`));
    touched.clear();
    const typing = document.activeElement !== null && document.activeElement.matches("input, select");
    if (shown && !typing) route();
  }

  function connect() {
    if (typeof EventSource === "undefined") return setLive(false, "live: unsupported");
    const again = reconnecting;
    reconnecting = false;
    source = new EventSource("/v1/events");
    source.addEventListener("open", () => {
      setLive(true, "live");
      retryMs = 1000;
      // A new stream starts at the log's end: what changed while none was open is not in the
      // panel, so a view of now is read again.
      if (again && asOf === null) route();
    });
    for (const t of EVENT_TYPES) source.addEventListener(t, onEvent);
    source.addEventListener("cutoff", () => setLive(false, "live: catching up"));
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) {
        setLive(false, "live: off");
        source = null;
        reconnecting = true;
        setTimeout(connect, retryMs);
        retryMs = Math.min(retryMs * 2, 30000);
      } else {
        setLive(false, "live: reconnecting");
      }
    });
  }

  // -- start ----------------------------------------------------------------------------------------------

  document.getElementById("asof").addEventListener("submit", (e) => {
    e.preventDefault();
    const value = parseAsOf(document.getElementById("asof-input").value);
    const { parts, params } = parseHash();
    if (value === null) params.delete("as_of"); else params.set("as_of", String(value));
    const q = params.toString();
    location.hash = "#/" + parts.map(encodeURIComponent).join("/") + (q ? "?" + q : "");
  });
  document.getElementById("asof-now").addEventListener("click", () => {
    document.getElementById("asof-input").value = "";
    document.getElementById("asof").requestSubmit();
  });
  window.addEventListener("hashchange", route);
  route();
  connect();
})();
