// chainsync dashboard: draws each view the dashboard pushes over its
// event stream. Every text that comes from a node is put on the page with
// textContent (el below), never as markup.
"use strict";

const token = document.querySelector('meta[name="chainsync-token"]').content;
const open = new Set(); // grid rows opened, by round id
let view = null;

// el makes an element with a class and a text.
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function clock(t) {
  if (!t) return "";
  const d = new Date(t);
  if (isNaN(d) || d.getFullYear() < 2) return "";
  const p = (n, w) => String(n).padStart(w || 2, "0");
  return p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds()) + "." + p(d.getMilliseconds(), 3);
}

function say(text, bad) {
  const m = document.getElementById("msg");
  m.textContent = text;
  m.className = bad ? "bad" : "good";
  m.hidden = false;
}

// ---- steering --------------------------------------------------------

const words = {
  hold: "Hold", release: "Release", approve: "Approve", deny: "Deny", pause: "Pause",
  resume: "Resume", cancel: "Cancel round", open: "Open a round", retry: "Retry",
};

// ask opens the dialog for op (on round, if given) and sends it.
function ask(op, round) {
  const dlg = document.getElementById("ask");
  const who = view && view.steer ? view.steer.node : "";
  let what = words[op] + " at " + who;
  if (round !== undefined) what += ", round " + (round === "" ? "(unnamed)" : round);
  document.getElementById("ask-what").textContent = what + " (as " + (view && view.steer ? view.steer.user : "") + ")";
  document.getElementById("ask-round-label").hidden = op !== "open";
  document.getElementById("ask-round").value = "";
  document.getElementById("reason").value = "";
  const ok = document.getElementById("ask-ok");
  ok.onclick = () => {
    const body = { op: op, reason: document.getElementById("reason").value };
    if (op === "open") {
      body.round = document.getElementById("ask-round").value.trim();
    } else if (round !== undefined && (round !== "" || op === "cancel" || op === "retry")) {
      body.round = round;
      body.has_round = true;
    }
    dlg.close();
    send(body);
  };
  document.getElementById("ask-cancel").onclick = () => dlg.close();
  dlg.showModal();
  document.getElementById(op === "open" ? "ask-round" : "reason").focus();
}

async function send(body) {
  try {
    const res = await fetch("/steer", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Chainsync-Token": token },
      body: JSON.stringify(body),
      credentials: "same-origin",
    });
    const rep = await res.json();
    if (rep.error) say(body.op + ": " + rep.error, true);
    else say(body.op + ": " + rep.message, false);
  } catch (e) {
    say(body.op + ": the dashboard did not answer (" + e + ")", true);
  }
}

function button(op, round) {
  const b = el("button", "op", words[op]);
  b.type = "button";
  b.dataset.op = op;
  b.onclick = (ev) => { ev.stopPropagation(); ask(op, round); };
  return b;
}

function takes(op) {
  return view && view.steer && view.steer.ops.includes(op);
}

// ---- drawing ---------------------------------------------------------

function drawNodes(v) {
  const box = document.getElementById("nodes");
  box.replaceChildren();
  v.nodes.forEach((n, i) => {
    if (i > 0) box.append(el("div", "arrow", "⇄"));
    const b = el("div", "box" + (n.answers ? "" : " down") + (n.control ? " control" : ""));
    b.dataset.node = n.label;
    b.append(el("h3", "", n.label));
    if (!n.answers) {
      b.append(el("p", "noanswer", "does not answer" + (n.since ? " since " + clock(n.since) : "")));
      b.append(el("p", "small", n.error));
      if (n.restarting) b.append(el("p", "restarting", n.restarting));
    } else {
      b.append(el("p", "role", n.role + " · " + n.in_flight + " in flight"));
      const links = el("p", "links");
      for (const [side, l] of [["pred", n.pred], ["succ", n.succ]]) {
        if (!l.exists) continue;
        const s = el("span", "link " + l.state, side + " " + (l.peer || "") + ": " + l.state);
        links.append(s, " ");
      }
      b.append(links);
    }
    for (const g of n.gates) {
      const p = el("p", "gate " + g.what, g.text);
      b.append(p);
    }
    if (n.faults.length) {
      const ul = el("ul", "faults");
      for (const f of n.faults.slice(-6)) {
        let t = clock(f.time) + " " + f.kind;
        if (f.blames) t += ", blames " + (f.side ? f.side + " " : "") + f.blames;
        t += " (round " + (f.round === "" ? "(unnamed)" : f.round) + "): " + f.error;
        const li = el("li", f.cleared ? "cleared" : "live", t);
        if (f.cleared) li.append(el("span", "when", " — cleared " + clock(f.cleared)));
        ul.append(li);
      }
      b.append(ul);
    }
    if (n.control && view.steer) {
      const ops = el("p", "ops");
      for (const op of ["hold", "release", "pause", "resume", "open"]) {
        if (takes(op)) ops.append(button(op));
      }
      b.append(ops);
    }
    box.append(b);
  });
}

// ladder draws messages as rows: one column per node, the arrow across
// the two nodes it joins.
function ladder(msgs, names) {
  const t = el("table", "ladder");
  const head = el("tr");
  for (const n of names) head.append(el("th", "", n));
  head.append(el("th", "", "at"));
  t.append(head);
  for (const m of msgs) {
    const tr = el("tr", "wave" + m.wave);
    tr.dataset.wave = m.wave;
    const lo = Math.min(m.from, m.to);
    for (let i = 0; i < lo; i++) tr.append(el("td"));
    const right = m.to > m.from;
    const td = el("td", "msg " + (right ? "right" : "left"), right ? m.cmd + " →" : "← " + m.cmd);
    td.colSpan = 2;
    tr.append(td);
    for (let i = lo + 2; i < names.length; i++) tr.append(el("td"));
    tr.append(el("td", "at", m.at ? clock(m.at) : "seen " + clock(m.seen)));
    t.append(tr);
  }
  return t;
}

function drawFlights(v) {
  const box = document.getElementById("flights");
  box.replaceChildren();
  if (!v.flights.length) {
    box.append(el("p", "quiet", "no round in progress on any node that answers"));
    return;
  }
  const names = v.nodes.map((n) => n.label);
  for (const f of v.flights) {
    const d = el("div", "flight");
    d.dataset.round = f.round;
    const h = el("h3", "", "round " + f.label);
    d.append(h);
    let w = f.words;
    if (f.for) w += " for " + f.for;
    d.append(el("p", "words", w));
    const st = el("p", "states");
    f.states.forEach((s, i) => st.append(el("span", "state", names[i] + ": " + (s || "-")), " "));
    d.append(st);
    if (f.approve) d.append(button("approve", f.round), button("deny", f.round));
    if (takes("cancel")) d.append(button("cancel", f.round));
    d.append(ladder(f.ladder, names));
    box.append(d);
  }
}

// ladders are the ladders of the opened rows, as last fetched: a view
// carries only how many messages each row's ladder has, and the page
// asks for the ladder of a row it shows opened.
const ladders = new Map();

async function loadLadder(id, holder, names) {
  try {
    const res = await fetch("/ladder?round=" + encodeURIComponent(id));
    if (!res.ok) return;
    const msgs = await res.json();
    ladders.set(id, msgs);
    if (holder.isConnected) holder.replaceChildren(ladder(msgs, names));
  } catch (e) {
    // the next view asks again
  }
}

function drawGrid(v) {
  const box = document.getElementById("grid");
  const t = el("table", "grid");
  const head = el("tr");
  head.append(el("th", "", "round"));
  for (const n of v.grid.nodes) head.append(el("th", "", n));
  head.append(el("th", "", "outcome"));
  t.append(head);
  for (const r of v.grid.rows) {
    const tr = el("tr", "row");
    tr.dataset.round = r.round;
    tr.append(el("td", "id", r.label));
    r.cells.forEach((c) => {
      const td = el("td", "cell " + c.outcome, c.task || "");
      td.dataset.outcome = c.outcome;
      if (c.note) {
        td.append(el("span", "note", c.note));
      }
      td.title = c.outcome + (c.note ? ": " + c.note : "");
      tr.append(td);
    });
    tr.append(el("td", "outcome " + r.outcome.replace(" ", "-"), r.outcome));
    tr.onclick = () => {
      if (open.has(r.round)) {
        open.delete(r.round);
        ladders.delete(r.round);
      } else open.add(r.round);
      drawn.grid = JSON.stringify([view.grid, view.steer, [...open]]);
      drawGrid(view);
    };
    t.append(tr);
    if (open.has(r.round)) {
      const dt = el("tr", "detail");
      const td = el("td");
      td.colSpan = v.grid.nodes.length + 2;
      for (const line of r.text) td.append(el("p", "text", line));
      if (!r.text.length) td.append(el("p", "text quiet", r.outcome));
      if (r.retry && takes("retry")) td.append(button("retry", r.round));
      const holder = el("div", "ladder-holder");
      if (ladders.has(r.round)) holder.append(ladder(ladders.get(r.round), v.grid.nodes));
      td.append(holder);
      loadLadder(r.round, holder, v.grid.nodes);
      dt.append(td);
      t.append(dt);
    }
  }
  const parts = [t];
  if (v.grid.hidden > 0) parts.push(el("p", "hidden", v.grid.hidden + " older rounds hidden (the newest " + v.grid.rows.length + " are shown)"));
  box.replaceChildren(...parts);
}

function drawEvents(v) {
  const ul = document.getElementById("events");
  ul.replaceChildren(...v.events.map((e) => el("li", "", e)));
  if (!v.events.length) ul.append(el("li", "quiet", "no steering yet"));
}

// drawn holds what each part of the page was last drawn from: a part
// whose data did not change is left as it is.
const drawn = {};

function part(name, data, fn, v) {
  const key = JSON.stringify(data);
  if (drawn[name] === key) return;
  drawn[name] = key;
  fn(v);
}

function draw(v) {
  view = v;
  document.getElementById("chain").textContent = v.chain;
  document.getElementById("updated").textContent = "updated " + clock(v.time);
  document.getElementById("who").textContent = v.steer
    ? "steering " + (v.steer.node || "(its node does not answer)") + " as " + v.steer.user
    : "read-only";
  part("nodes", [v.nodes, v.steer], drawNodes, v);
  part("flights", [v.flights, v.steer, v.nodes.map((n) => n.label)], drawFlights, v);
  part("grid", [v.grid, v.steer, [...open]], drawGrid, v);
  part("events", v.events, drawEvents, v);
}

// A view that comes while a button is pressed waits until it is
// released, so that redrawing never swallows a click.
let pressed = false;
let waiting = null;
document.addEventListener("pointerdown", () => { pressed = true; }, true);
document.addEventListener("pointerup", () => {
  setTimeout(() => { // after the click the release makes
    pressed = false;
    if (waiting) {
      const v = waiting;
      waiting = null;
      draw(v);
    }
  }, 0);
}, true);

function take(v) {
  if (pressed) waiting = v;
  else draw(v);
}

// ---- the event stream ------------------------------------------------

function connect() {
  const live = document.getElementById("live");
  const es = new EventSource("/events");
  es.onopen = () => { live.textContent = "live"; live.className = "live on"; };
  es.onerror = () => {
    live.textContent = "reconnecting…";
    live.className = "live off";
    // The browser retries a broken stream by itself; one it gave up on
    // (an error answer) is opened again here.
    if (es.readyState === EventSource.CLOSED) setTimeout(connect, 2000);
  };
  es.onmessage = (ev) => take(JSON.parse(ev.data));
}

connect();
