// flow.js: task types as funnels of stages, throughput and queue wait over
// time, a filtered task list with a cursor, one task's page, and the
// operator actions the running server has.
import { get, post, ApiError } from './api.js';
import { h, spark, History, Rate, ago, time, poll, replace } from './ui.js';
import { showError, clearError } from './app.js';

const STATUSES = ['pending', 'processing', 'success', 'failed', 'cancelled', 'waiting'];
const statusName = (n) => STATUSES[n - 1] || String(n);
const hist = new History(90);
const rates = new Rate();

// Actions, by endpoint; each is shown only when the server has it (GET
// /v1/console asks the server, so the page never probes with requests that
// fail).
const ACTIONS = {
  cancel: 'cancel_task',
  retry: 'retry_task',
  delete: 'delete_task',
  pause: 'pause_task_type',
  resume: 'resume_task_type',
};
const have = {};
async function detect() {
  try {
    const r = await get('/v1/console');
    for (const [k, a] of Object.entries(ACTIONS)) have[k] = !!r.actions[a];
  } catch (e) { /* shown by the pages' own polls */ }
}

function refused(e, what) {
  if (e instanceof ApiError && e.status === 401) {
    showError(`${what}: refused, the admin token is missing or wrong (401).`);
  } else {
    showError(`${what}: ${e.message}`);
  }
}

async function act(name, body, done) {
  try {
    await post('/v1/' + ACTIONS[name], body);
    clearError();
  } catch (e) { refused(e, name); }
  done();
}

// ---- overview: one card per type ----

// pausedKeys is a type's rate keys paused now (a worker's 429, or out of
// the type's rate_limit_per_second), each until when.
function pausedKeys(tt) {
  const keys = (tt && tt.paused_keys) || [];
  if (!keys.length) return null;
  return h('p', { class: 'pausedkeys small' }, 'paused rate keys: ',
    keys.map((k) => h('span', { class: 'badge paused', dataset: { ratekey: k.rate_key }, title: 'no task with this rate_key is held until ' + k.until },
      `${k.rate_key} until ${time(k.until)}`)),
    tt.rate_limit_per_second ? h('span', { class: 'muted' }, ` (limit ${tt.rate_limit_per_second}/s per key)`) : null);
}

// fairness is a fair type's line: its holds are shared across fairness
// keys by weight (keys not listed weigh 1).
function fairness(tt) {
  if (!tt || !tt.fair) return null;
  const w = Object.entries(tt.fairness_weights || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return h('p', { class: 'fairness small', title: 'each hold is shared across the fairness keys with due tasks, by weight' }, 'fair shares per fairness key',
    w.length ? h('span', { class: 'muted' }, ': ', w.map(([k, v]) => h('span', { class: 'badge', dataset: { fairkey: k } }, `${k} ×${v}`)), ' (others ×1)') : h('span', { class: 'muted' }, ', equal weights'));
}

function typeCard(st, fun, tt, now, refresh) {
  const name = st.task_type;
  const c = st.counts || {};
  const done = (c.success || 0) + (c.failed || 0) + (c.cancelled || 0);
  const tput = rates.rate(name + '/done', done, now);
  const tp = hist.push(name + '/tput', tput);
  const wait = hist.push(name + '/wait', fun ? fun.oldest_pending_ms / 1000 : NaN);
  const paused = st.paused === true;
  const stages = fun ? fun.stages : [];
  const widest = Math.max(1, ...stages.map((s) => STATUSES.reduce((a, k) => a + (s.counts[k] || 0), 0)));
  return h('section', { class: 'card type', dataset: { type: name, paused: String(paused) } },
    h('h2', {}, name,
      paused ? h('span', { class: 'badge paused' }, 'paused') : null,
      h('span', { class: 'muted' }, ' oldest due pending: ', h('b', { class: 'oldest' }, fun && fun.oldest_pending_ms ? ago(fun.oldest_pending_ms) : 'none')),
      have.pause && !paused ? h('button', { class: 'act pause', onclick: () => act('pause', { task_type: name }, refresh) }, 'pause') : null,
      have.resume && paused ? h('button', { class: 'act resume', onclick: () => act('resume', { task_type: name }, refresh) }, 'resume') : null),
    pausedKeys(tt),
    fairness(tt),
    h('div', { class: 'counts' }, STATUSES.map((k) => h('a', { class: 'count ' + k, href: `#tasks?task_type=${encodeURIComponent(name)}&status=${k}` },
      h('span', { class: 'n', dataset: { status: k } }, c[k] || 0), ' ', k))),
    h('div', { class: 'charts' },
      h('span', {}, 'finished/s ', spark(tp, { fmt: (v) => v.toFixed(1), title: 'tasks ended per second' })),
      h('span', {}, 'queue wait ', spark(wait, { cls: 'warn', fmt: (v) => ago(v * 1000), title: 'age of the oldest due pending task' }))),
    h('table', { class: 'funnel' },
      h('thead', {}, h('tr', {}, h('th', {}, 'stage'), STATUSES.map((k) => h('th', { class: k }, k)), h('th', {}, ''))),
      h('tbody', {}, stages.map((s) => {
        const total = STATUSES.reduce((a, k) => a + (s.counts[k] || 0), 0);
        const segs = h('span', { class: 'stack' }, STATUSES.map((k) => {
          const seg = h('span', { class: 'seg ' + k, title: `${k}: ${s.counts[k] || 0}` });
          seg.style.width = ((s.counts[k] || 0) / widest * 100).toFixed(2) + '%';
          return seg;
        }));
        return h('tr', { dataset: { stage: s.stage } }, h('td', {}, h('a', { href: `#tasks?task_type=${encodeURIComponent(name)}&task_stage=${encodeURIComponent(s.stage)}` }, s.stage)),
          STATUSES.map((k) => h('td', { class: 'num' }, s.counts[k] || '')), h('td', { class: 'stackcell', title: `${total} tasks` }, segs));
      }))),
    fun && fun.truncated ? h('p', { class: 'small muted' }, 'Stage counts are from the first 2,000 tasks per status; the totals above are exact.') : null);
}

function overview(main) {
  const body = h('div', {}, h('p', { class: 'muted' }, 'loading…'));
  replace(main, h('h1', {}, 'flow ', h('a', { class: 'small', href: '#tasks' }, 'all tasks →')), body);
  return poll(async () => {
    let st, fn;
    try {
      [st, fn] = await Promise.all([get('/v1/stats'), get('/v1/funnel')]);
      clearError();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) showError(`Cannot read the flow server: ${e.message}`);
      return;
    }
    const funs = new Map(fn.types.map((t) => [t.task_type, t]));
    // Each type's settings, for its paused rate keys and its fairness (a read of the type
    // and of its paused keys); a type that cannot be read shows without.
    const types = await Promise.all(st.types.map((t) => get('/v1/get_task_type?task_type=' + encodeURIComponent(t.task_type)).catch(() => null)));
    const now = Date.now();
    const cards = st.types.map((t, i) => typeCard(t, funs.get(t.task_type), types[i], now, () => p.now()));
    replace(body, cards.length ? cards : h('p', { class: 'muted' }, 'No task types registered yet.'));
  }, 2000);
}
let p = null;

// ---- task list ----

function taskList(main, params) {
  const f = Object.fromEntries(['task_type', 'status', 'task_stage'].map((k) => [k, params.get(k) || '']));
  const cursors = [''];
  const form = h('form', { class: 'filters' },
    h('label', {}, 'type ', h('input', { name: 'task_type', value: f.task_type, size: 14 })),
    h('label', {}, 'status ', h('select', { name: 'status' }, h('option', { value: '' }, 'any'),
      STATUSES.map((k) => h('option', { value: k, selected: f.status === k }, k)))),
    h('label', {}, 'stage ', h('input', { name: 'task_stage', value: f.task_stage, size: 12 })),
    h('button', { type: 'submit' }, 'filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
    location.hash = '#tasks?' + q.toString();
  });
  const table = h('div', {}, h('p', { class: 'muted' }, 'loading…'));
  const pager = h('div', { class: 'pager' });
  replace(main, h('h1', {}, h('a', { href: '#' }, 'flow'), ' / tasks'), form, table, pager);
  let page = 0;
  const load = async () => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
    q.set('limit', '50');
    if (cursors[page]) q.set('cursor', cursors[page]);
    let data;
    try {
      data = await get('/v1/get_task_list?' + q.toString());
      clearError();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) showError(`Task list: ${e.message}`);
      return;
    }
    replace(table, h('table', { class: 'tasks' },
      h('thead', {}, h('tr', {}, ['task', 'type', 'stage', 'status', 'retries', 'due', 'modified', 'owner'].map((c) => h('th', {}, c)))),
      h('tbody', {}, data.tasks.map((t) => h('tr', { dataset: { task: t.task_id } },
        h('td', {}, h('a', { href: '#task/' + t.task_id, class: 'mono' }, t.task_id)),
        h('td', {}, t.task_type), h('td', {}, t.task_stage),
        h('td', {}, h('span', { class: 'badge ' + statusName(t.status) }, statusName(t.status))),
        h('td', { class: 'num' }, `${t.crt_retry_num}/${t.max_retry_num}`),
        h('td', {}, time(t.order_time)), h('td', {}, time(t.modify_time)), h('td', {}, t.owner || ''))))),
    data.tasks.length ? null : h('p', { class: 'muted' }, 'No tasks match.'));
    cursors[page + 1] = data.next_cursor || '';
    replace(pager,
      page > 0 ? h('button', { class: 'prev', onclick: () => { page--; l.now(); } }, '← previous') : null,
      h('span', { class: 'muted' }, ` page ${page + 1} `),
      data.next_cursor ? h('button', { class: 'next', onclick: () => { page++; l.now(); } }, 'next →') : null);
  };
  const l = poll(load, 3000);
  return l;
}

// ---- one task ----

function taskPage(main, id) {
  const body = h('div', {}, h('p', { class: 'muted' }, 'loading…'));
  replace(main, h('h1', {}, h('a', { href: '#' }, 'flow'), ' / ', h('a', { href: '#tasks' }, 'tasks'), ' / ', h('span', { class: 'mono' }, id)), body);
  const t = poll(async () => {
    let task;
    let kids = null;
    try {
      task = await get('/v1/get_task?task_id=' + encodeURIComponent(id));
      // A fan-out parent: its first page of children, for their status and error.
      if (task.children) kids = await get('/v1/get_task_children?limit=100&task_id=' + encodeURIComponent(id));
      clearError();
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) { replace(body, h('p', { class: 'muted' }, 'No such task (deleted or pruned).')); return; }
      if (!(e instanceof ApiError && e.status === 401)) showError(`Task: ${e.message}`);
      return;
    }
    const s = statusName(task.status);
    const ended = ['success', 'failed', 'cancelled'].includes(s);
    let ctx = '';
    if (task.task_context !== undefined) ctx = JSON.stringify(task.task_context, null, 2);
    replace(body,
      h('div', { class: 'actions taskactions' },
        have.cancel && !ended ? h('button', { class: 'act cancel', onclick: () => act('cancel', { task_id: id }, () => t.now()) }, 'cancel') : null,
        have.retry && (s === 'failed' || s === 'cancelled') ? h('button', { class: 'act retry', onclick: () => act('retry', { task_id: id }, () => t.now()) }, 'retry') : null,
        have.delete ? h('button', {
          class: 'act delete danger', onclick: () => {
            if (!confirm(`Delete task ${id}? It cannot be undone.`)) return;
            t.stop(); // the task is going: no more polls of it
            act('delete', { task_id: id }, () => { location.hash = '#tasks?task_type=' + encodeURIComponent(task.task_type); });
          },
        }, 'delete') : null),
      h('dl', { class: 'fields' }, [
        ['status', h('span', { class: 'badge ' + s, dataset: { status: s } }, s)], ['type', task.task_type], ['stage', task.task_stage],
        ['priority', task.priority], ['retries', `${task.crt_retry_num} of ${task.max_retry_num}`], ['due', time(task.order_time)],
        ...(task.sequence_key ? [['sequence key', task.sequence_key]] : []), ...(task.rate_key ? [['rate key', task.rate_key]] : []),
        ...(task.fairness_key ? [['fairness key', task.fairness_key]] : []),
        ['owner', task.owner || '–'], ['lease expiry', time(task.lease_expiry)], ['created', time(task.create_time)], ['modified', time(task.modify_time)],
      ].map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
      h('h2', {}, 'context'), h('pre', { class: 'context' }, ctx || '(none)'),
      kids ? h('h2', {}, 'children ', h('span', { class: 'muted' },
        STATUSES.filter((k) => task.children[k]).map((k) => `${k} ${task.children[k]}`).join(', '))) : null,
      kids ? h('table', { class: 'children' },
        h('thead', {}, h('tr', {}, ['task', 'type', 'stage', 'status', 'modified', 'error'].map((c) => h('th', {}, c)))),
        h('tbody', {}, kids.children.map((k) => h('tr', {},
          h('td', {}, h('a', { class: 'mono', href: '#task/' + encodeURIComponent(k.task_id) }, k.task_id)), h('td', {}, k.task_type), h('td', {}, k.task_stage),
          h('td', {}, h('span', { class: 'badge ' + statusName(k.status) }, statusName(k.status))), h('td', {}, time(k.modify_time)),
          h('td', { class: 'error' }, k.error || ''))))) : null,
      kids && kids.next_cursor ? h('p', { class: 'muted' }, 'first 100 shown; fulcrum flow children ' + id + ' lists all') : null,
      h('h2', {}, 'schedule log'),
      h('table', { class: 'log' },
        h('thead', {}, h('tr', {}, ['at', 'event', 'stage', 'worker', 'error'].map((c) => h('th', {}, c)))),
        h('tbody', {}, (task.schedule_log || []).map((e) => h('tr', { class: 'ev ' + e.event },
          h('td', {}, time(e.at)), h('td', {}, e.event), h('td', {}, e.stage || ''), h('td', {}, e.worker || ''), h('td', { class: 'error' }, e.error || ''))))));
  }, 2000);
  return t;
}

// ---- routing by location.hash ----

export async function start(main) {
  await detect();
  let current = null;
  const route = () => {
    if (current) current.stop();
    const hash = location.hash.slice(1);
    if (hash.startsWith('task/')) current = taskPage(main, decodeURIComponent(hash.slice(5)));
    else if (hash.startsWith('tasks')) current = taskList(main, new URLSearchParams(hash.split('?')[1] || ''));
    else { current = overview(main); p = current; }
  };
  window.addEventListener('hashchange', route);
  window.addEventListener('fulcrum:token', async () => { await detect(); route(); });
  route();
}
