// supervisor.js: workers with their load, tasks with their holders and
// deficits, recent events, sink counters. Reads GET /workers, GET /tasks
// and GET /metrics.
import { get, post, token, ApiError } from './api.js';
import { h, bar, spark, History, Rate, poll, replace } from './ui.js';
import { showError, clearError } from './app.js';

const hist = new History(90);
const rates = new Rate();
const events = []; // newest first, at most 100
const SHOW_TASKS = 300;

// metrics parses the Prometheus text format's samples (no histograms
// needed) into name{labels} -> value.
function parseMetrics(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const i = line.lastIndexOf(' ');
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return m;
}

async function metrics() {
  const headers = {};
  if (token()) headers['Authorization'] = 'Bearer ' + token();
  const r = await fetch('/metrics', { headers, cache: 'no-store' });
  if (!r.ok) throw new ApiError(r.status, r.statusText);
  return parseMetrics(await r.text());
}

// Operator actions this supervisor has (GET /console/actions).
let have = {};
async function detect() {
  try { have = (await get('/console/actions')).actions; } catch { have = {}; }
}

async function act(what, path, done) {
  try {
    const r = await post(path);
    clearError();
    if (what === 'rebalance') note('move', `rebalance asked: ${r.moved} holding(s) moved`);
  } catch (e) {
    showError(e instanceof ApiError && e.status === 401 ? `${what}: refused, the admin token is missing or wrong (401).` : `${what}: ${e.message}`);
  }
  done();
}

function note(kind, text) {
  events.unshift({ at: new Date(), kind, text });
  if (events.length > 100) events.pop();
}

let prev = null; // last snapshot, to see what changed

// diff turns two snapshots into events: workers that joined or left, and
// tasks whose holders changed (a reassignment), with the counters that
// say why (deaths, task timeouts, rebalancing moves).
function diff(cur) {
  if (!prev) { prev = cur; return; }
  const before = new Map(prev.workers.map((w) => [w.id, w]));
  const after = new Map(cur.workers.map((w) => [w.id, w]));
  for (const id of after.keys()) if (!before.has(id)) note('join', `worker ${id} joined (max load ${after.get(id).max_load})`);
  for (const id of before.keys()) if (!after.has(id)) note('death', `worker ${id} left (dead or gone)`);
  for (const [id, w] of after) {
    const b = before.get(id);
    if (b && w.max_load < b.max_load) note('drain', `worker ${id} lowered its max load ${b.max_load} → ${w.max_load}`);
    if (b && w.draining && !b.draining) note('drain', `worker ${id} draining (takes nothing new; its tasks move)`);
  }
  const ht = new Map(prev.tasks.map((t) => [t.id, t]));
  let moved = 0;
  for (const t of cur.tasks) {
    const b = ht.get(t.id);
    if (!b) continue;
    const gone = b.holders.filter((x) => !t.holders.includes(x));
    const added = t.holders.filter((x) => !b.holders.includes(x));
    if (gone.length || added.length) {
      if (moved++ < 20) note('move', `task ${t.id}: ${gone.length ? gone.join(', ') : '–'} → ${added.length ? added.join(', ') : '–'}`);
    }
  }
  if (moved > 20) note('move', `…and ${moved - 20} more tasks reassigned`);
  const c = (k) => (cur.m.get(k) || 0) - (prev.m.get(k) || 0);
  const deaths = c('fulcrum_supervisor_worker_deaths_total');
  if (deaths > 0) note('death', `${deaths} worker death(s) declared (worker_timeout)`);
  const tto = c('fulcrum_supervisor_task_timeouts_total');
  if (tto > 0) note('move', `${tto} holding(s) vacated after task_timeout`);
  const mv = c('fulcrum_supervisor_holdings_moved_total');
  if (mv > 0) note('move', `${mv} holding(s) moved by rebalancing`);
  prev = cur;
}

const COUNTERS = [
  ['sink published', 'fulcrum_supervisor_sink_published_total'],
  ['sink dropped', 'fulcrum_supervisor_sink_dropped_total'],
  ['payloads first seen', 'fulcrum_supervisor_payloads_total{result="published"}'],
  ['duplicates', 'fulcrum_supervisor_payloads_total{result="duplicate"}'],
  ['unknown task', 'fulcrum_supervisor_payloads_total{result="unknown_task"}'],
  ['worker deaths', 'fulcrum_supervisor_worker_deaths_total'],
  ['holdings placed', 'fulcrum_supervisor_holdings_placed_total'],
  ['holdings vacated', 'fulcrum_supervisor_holdings_vacated_total'],
  ['holdings moved', 'fulcrum_supervisor_holdings_moved_total'],
];

export async function start(main) {
  await detect();
  const head = h('div', { class: 'summary' });
  const workers = h('div', { class: 'workers' });
  const tasks = h('div', {});
  const evs = h('ol', { class: 'events' });
  const sink = h('div', { class: 'counters' });
  let onlyDeficit = false;
  const toggle = h('label', {}, h('input', { type: 'checkbox', onchange: (e) => { onlyDeficit = e.target.checked; p.now(); } }), ' only tasks with a deficit');
  replace(main, h('h1', {}, 'Supervisor'), head,
    h('div', { class: 'cols' },
      h('section', { class: 'card' }, h('h2', {}, 'workers'), workers),
      h('section', { class: 'card' }, h('h2', {}, 'recent events ', h('span', { class: 'small muted' }, '(seen by this page)')), evs),
      h('section', { class: 'card' }, h('h2', {}, 'sink and counters'), sink)),
    h('section', { class: 'card' }, h('h2', {}, 'tasks ', toggle), tasks));
  const p = poll(async () => {
    let ws, ts, m;
    try {
      [ws, ts, m] = await Promise.all([get('/workers'), get('/tasks'), metrics()]);
      clearError();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) showError(`Cannot read the supervisor: ${e.message}`);
      return;
    }
    diff({ workers: ws.workers, tasks: ts.tasks, m });
    const now = Date.now();
    const pub = hist.push('pub', rates.rate('pub', m.get('fulcrum_supervisor_sink_published_total') || 0, now));
    const drop = hist.push('drop', rates.rate('drop', m.get('fulcrum_supervisor_sink_dropped_total') || 0, now));
    const d = ts.deficit || { tasks: 0, holders: 0 };
    replace(head,
      h('span', { class: 'badge ' + (ws.phase === 'running' ? 'healthy' : 'warming') }, ws.phase),
      h('span', {}, ` ${ws.workers.length} workers · ${ts.tasks.length} tasks · k = ${ts.redundancy} · `),
      have.rebalance ? h('button', { class: 'act rebalance', title: 'POST /rebalance: move holdings toward free capacity', onclick: () => act('rebalance', '/rebalance', () => p.now()) }, 'rebalance') : null,
      h('span', { class: d.tasks ? 'deficit' : '', dataset: { deficit: d.tasks } }, `${d.tasks} ${d.tasks === 1 ? 'task' : 'tasks'} short of k (${d.holders} ${d.holders === 1 ? 'holder' : 'holders'} missing)`));
    const holding = new Map();
    for (const t of ts.tasks) for (const w of t.holders) holding.set(w, (holding.get(w) || 0) + 1);
    replace(workers, ws.workers.length ? h('table', {},
      h('thead', {}, h('tr', {}, ['worker', 'running / max', 'free', ''].map((c) => h('th', {}, c)))),
      h('tbody', {}, ws.workers.map((w) => h('tr', { class: 'worker', dataset: { worker: w.id, draining: String(!!w.draining) } },
        h('td', { class: 'mono' }, w.id), h('td', {}, bar(w.load, w.max_load)), h('td', { class: 'num' }, w.free),
        h('td', { class: 'actions' },
          w.connected ? null : h('span', { class: 'badge unhealthy' }, 'disconnected'),
          w.draining ? h('span', { class: 'badge warming' }, 'draining') : null,
          have.drain && !w.draining ? h('button', {
            class: 'act drain danger', onclick: () => {
              if (confirm(`Drain ${w.id}? It takes nothing new and its tasks move to other workers.`)) act('drain', `/workers/${encodeURIComponent(w.id)}/drain`, () => p.now());
            },
          }, 'drain') : null))))) : h('p', { class: 'muted' }, 'No workers.'));
    replace(evs, events.length ? events.map((e) => h('li', { class: 'ev ' + e.kind }, h('span', { class: 'muted' }, e.at.toLocaleTimeString() + ' '), e.text)) : h('li', { class: 'muted' }, 'Nothing yet.'));
    replace(sink, h('div', {}, 'published/s ', spark(pub, { fmt: (v) => v.toFixed(1) }), ' dropped/s ', spark(drop, { cls: 'err', fmt: (v) => v.toFixed(1) })),
      h('dl', { class: 'fields' }, COUNTERS.map(([label, k]) => [h('dt', {}, label), h('dd', { class: k.includes('dropped') && m.get(k) ? 'deficit' : '' }, m.has(k) ? m.get(k) : '–')])));
    const list = ts.tasks.filter((t) => !onlyDeficit || t.missing > 0);
    list.sort((a, b) => (b.missing - a.missing) || (a.id < b.id ? -1 : 1));
    replace(tasks, h('table', { class: 'tasks' },
      h('thead', {}, h('tr', {}, ['task', 'holders', 'deficit'].map((c) => h('th', {}, c)))),
      h('tbody', {}, list.slice(0, SHOW_TASKS).map((t) => h('tr', { class: t.missing > 0 ? 'task deficit' : 'task', dataset: { task: t.id } },
        h('td', { class: 'mono' }, t.id),
        h('td', {}, t.holders.map((w) => h('span', { class: 'chip' }, w))),
        h('td', { class: 'num' }, t.missing > 0 ? `${t.missing} missing` : ''))))),
    list.length > SHOW_TASKS ? h('p', { class: 'small muted' }, `${SHOW_TASKS} of ${list.length} shown, deficits first.`) : null);
  }, 1000);
  window.addEventListener('fulcrum:token', async () => { await detect(); p.now(); });
}
