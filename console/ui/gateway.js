// gateway.js: upstreams and their targets, live, with per-target actions.
import { get, post, token, ApiError } from './api.js';
import { h, spark, bar, History, Rate, ago, poll, replace } from './ui.js';
import { showError, clearError } from './app.js';
import { start as startRoutes } from './routes.js';

const hist = new History(60);
const rates = new Rate();

function state(t) {
  if (t.disabled) return ['disabled', 'disabled'];
  if (t.ejected) return ['ejected', `ejected · ${ago(t.ejected_for_ms)} left`];
  if (!t.healthy) return ['unhealthy', 'unhealthy'];
  if (t.warming) return ['warming', `warming ${Math.round(t.warmup_progress * 100)}%`];
  return ['healthy', 'healthy'];
}

async function act(up, t, change, p) {
  try {
    await post(`/upstreams/${encodeURIComponent(up)}/targets/${encodeURIComponent(t.addr)}`, change);
    clearError();
  } catch (e) {
    showError(e instanceof ApiError && e.status === 401 ? 'Action refused: the admin token is missing or wrong (401).' : `Action refused: ${e.message}`);
  }
  p.now();
}

function targetRow(up, t, now, p) {
  const key = up.name + '/' + t.addr;
  const rps = rates.rate(key + '/r', t.requests, now);
  const eps = rates.rate(key + '/f', t.failures, now);
  const lat = hist.push(key + '/lat', t.latency_avg_ms);
  const rs = hist.push(key + '/rps', rps);
  const es = hist.push(key + '/eps', eps);
  const [st, label] = state(t);
  const weight = h('input', { type: 'number', min: 0, value: t.weight, class: 'weight', 'aria-label': 'weight of ' + t.addr });
  const permits = t.permits > 0 ? t.permits : 0;
  return h('tr', { class: 'target ' + st, dataset: { target: t.addr, state: st } },
    h('td', { class: 'addr' }, t.url),
    h('td', {}, h('span', { class: 'badge ' + st }, label)),
    h('td', { class: 'num' }, t.effective_weight, ' / ', t.weight,
      t.warming ? bar(t.effective_weight, t.weight, { label: `warm-up ${Math.round(t.warmup_progress * 100)}%`, cls: 'thin' }) : null),
    h('td', {}, bar(t.in_flight, permits, {
      label: `${t.in_flight} / ${permits || '∞'}${t.permits_source ? ' ' + t.permits_source : ''}`,
    })),
    h('td', {}, spark(lat, { fmt: (v) => v.toFixed(1) + ' ms', title: 'average latency' })),
    h('td', {}, spark(rs, { fmt: (v) => v.toFixed(0) + '/s', title: 'requests per second' })),
    h('td', {}, spark(es, { cls: 'err', fmt: (v) => v.toFixed(0) + '/s', title: 'failures per second' }), h('div', { class: 'small' }, `${t.failures} of ${t.requests}`)),
    h('td', { class: 'actions' },
      t.disabled
        ? h('button', { class: 'act enable', onclick: () => act(up.name, t, { disabled: false }, p) }, 'enable')
        : h('button', { class: 'act disable', onclick: () => act(up.name, t, { disabled: true }, p) }, 'disable'),
      weight,
      h('button', { class: 'act setweight', onclick: () => act(up.name, t, { weight: Number(weight.value) }, p) }, 'set weight'),
      h('button', {
        class: 'act drain danger', onclick: () => {
          if (confirm(`Drain ${t.url}? It is removed from ${up.name}: no new requests, in-flight ones finish. A reload brings it back.`)) act(up.name, t, { drain: true }, p);
        },
      }, 'drain')));
}

export function start(main) {
  const body = h('div', { id: 'upstreams' }, h('p', { class: 'muted' }, 'loading…'));
  const routes = h('section', { class: 'card', id: 'routes' });
  replace(main, h('h1', {}, 'Gateway'), body, routes);
  startRoutes(routes);
  let editing = false; // while a weight is being typed, keep the table still
  main.addEventListener('focusin', (e) => { editing = e.target.classList.contains('weight'); });
  main.addEventListener('focusout', () => { editing = false; });
  const p = poll(async () => {
    let data;
    try {
      data = await get('/console/upstreams');
      clearError();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) showError(`Cannot read /console/upstreams: ${e.message}`);
      return;
    }
    if (editing) return;
    const now = Date.now();
    replace(body, data.upstreams.map((up) => h('section', { class: 'card', dataset: { upstream: up.name } },
      h('h2', {}, up.name, h('span', { class: 'muted' }, ` ${up.strategy}${up.hash_key ? ' · ' + up.hash_key : ''} · ${up.targets.length} targets`)),
      h('table', { class: 'targets' },
        h('thead', {}, h('tr', {}, ['target', 'state', 'weight (eff. / conf.)', 'in flight / permits', 'latency', 'requests', 'errors', token() ? 'actions' : 'actions (token may be needed)'].map((c) => h('th', {}, c)))),
        h('tbody', {}, up.targets.map((t) => targetRow(up, t, now, p)))))));
    if (!data.upstreams.length) replace(body, h('p', { class: 'muted' }, 'No upstreams.'));
  }, 1000);
  window.addEventListener('fulcrum:token', () => p.now());
}
