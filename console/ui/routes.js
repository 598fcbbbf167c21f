// routes.js: the gateway's compiled routes (GET /routes), in file order,
// first match wins. A split shows each side's share now (a ramp's
// progress), the requests it got and its upstream's 5xx answers, so a
// canary's error rate reads against the other sides'.
import { get, ApiError } from './api.js';
import { h, spark, bar, History, Rate, poll, replace } from './ui.js';
import { showError, clearError } from './app.js';

const SHOWN = 200; // a table of 10,000 routes is for GET /routes, not for a page
const hist = new History(60);
const rates = new Rate();

function matchText(m) {
  const parts = [];
  if (m.host) parts.push(m.host);
  if (m.path) parts.push(m.path);
  else parts.push((m.path_prefix || '/') + '*');
  if (m.methods?.length) parts.push(m.methods.join(','));
  for (const [k, v] of Object.entries(m.headers || {})) parts.push(v === '*' ? `${k} present` : `${k}: ${v}`);
  for (const [k, v] of Object.entries(m.query || {})) parts.push(`?${k}=${v}`);
  return parts;
}

function headerOps(side, ops) {
  if (!ops) return null;
  const out = [];
  for (const [k, v] of Object.entries(ops.set || {})) out.push(`set ${k}: ${v}`);
  for (const [k, v] of Object.entries(ops.add || {})) out.push(`add ${k}: ${v}`);
  for (const k of ops.remove || []) out.push(`remove ${k}`);
  return h('div', { class: 'small' }, `${side} headers: `, out.join('; '));
}

function changes(r) {
  return [
    r.rewrite ? h('div', { class: 'mono' }, r.rewrite) : null,
    r.redirect ? h('div', { class: 'mono' }, `redirect ${r.redirect.status || ''} → ${r.redirect.location || ''}`) : null,
    headerOps('request', r.request_headers),
    headerOps('response', r.response_headers),
  ].filter(Boolean);
}

function rateLimit(rl) {
  if (!rl) return '–';
  // The shared limiter's URL may carry a password: say only that it is shared.
  return [h('div', {}, `${rl.per_second}/s, burst ${rl.burst} per ${rl.key || 'client_ip'}${rl.shared ? ' · shared' : ''}`),
    h('div', { class: 'small limited' + (rl.limited > 0 ? ' some' : '') }, `${rl.limited} answered 429`)];
}

const pct = (n, d) => (d > 0 ? (100 * n / d) : 0);

// sidesTable draws a split's sides; a side whose upstream's error rate is
// above the rest of the split's is marked worse.
function sidesTable(r, now) {
  // Sides at the very start of their ramps only: the gateway then splits
  // by full weights.
  const totalNow = r.split.reduce((a, s) => a + s.weight_now, 0);
  const shareOf = (s) => (totalNow > 0 ? pct(s.weight_now, totalNow) : pct(s.weight, r.split.reduce((a, o) => a + o.weight, 0)));
  const rows = r.split.map((s) => {
    const key = `${r.index}/${s.upstream}`;
    const rs = hist.push(key + '/rps', rates.rate(key + '/r', s.requests, now));
    const es = hist.push(key + '/eps', rates.rate(key + '/e', s.upstream_errors, now));
    const rest = r.split.filter((o) => o !== s);
    const restErr = rest.reduce((a, o) => a + o.upstream_errors, 0);
    const restResp = rest.reduce((a, o) => a + o.upstream_responses, 0);
    const errPct = pct(s.upstream_errors, s.upstream_responses);
    // Only a side this route sends requests to is compared: the counts
    // are its upstream's, from every route that reaches it.
    const worse = s.requests > 0 && s.upstream_errors > 0 && errPct > pct(restErr, restResp);
    const ramping = s.ramp && s.ramp_percent < 100;
    return h('tr', { class: 'side' + (worse ? ' worse' : ''), dataset: { route: r.index, upstream: s.upstream, worse: String(worse) } },
      h('td', { class: 'mono' }, s.upstream),
      h('td', { class: 'num share' }, `${shareOf(s).toFixed(1)}%`,
        h('div', { class: 'small muted' }, `weight ${+s.weight_now.toFixed(2)} / ${s.weight}`)),
      h('td', { class: 'ramp' }, ramping
        ? bar(s.ramp_percent, 100, { label: `ramp ${s.ramp} · ${s.ramp_percent.toFixed(0)}%`, warn: 2 })
        : h('span', { class: 'muted' }, s.ramp ? `ramped (${s.ramp})` : 'no ramp')),
      h('td', {}, spark(rs, { fmt: (v) => v.toFixed(0) + '/s', title: 'requests per second' }),
        h('div', { class: 'small' }, h('span', { class: 'requests' }, s.requests), ' requests')),
      h('td', { class: 'errcell' }, spark(es, { cls: 'err', fmt: (v) => v.toFixed(0) + '/s', title: '5xx answers per second' }),
        h('div', { class: 'small' }, h('span', { class: 'errors' }, s.upstream_errors), ' of ',
          h('span', { class: 'responses' }, s.upstream_responses), h('b', { class: 'errpct' }, ` · ${errPct.toFixed(1)}%`))));
  });
  return h('table', { class: 'sides' },
    h('thead', {}, h('tr', {}, ['side', 'share now', 'ramp', 'requests', 'upstream\'s 5xx, all routes'].map((c) => h('th', {}, c)))),
    h('tbody', {}, rows));
}

function routeRow(r, now) {
  return h('tr', { class: 'route', dataset: { route: r.index } },
    h('td', { class: 'num muted' }, r.index),
    h('td', {}, matchText(r.match).map((p) => h('span', { class: 'chip' }, p))),
    h('td', {}, r.split ? [sidesTable(r, now), r.split_key ? h('div', { class: 'small muted' }, `sticky by ${r.split_key}`) : null]
      : (r.upstream ? h('span', { class: 'mono' }, r.upstream) : h('span', { class: 'muted' }, '–'))),
    h('td', {}, changes(r)),
    h('td', {}, rateLimit(r.rate_limit)));
}

// start draws the routes card into el and keeps it live.
export function start(el) {
  replace(el, h('p', { class: 'muted' }, 'loading routes…'));
  const p = poll(async () => {
    let data;
    try {
      data = await get('/routes');
      clearError();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) showError(`Cannot read /routes: ${e.message}`);
      return;
    }
    const routes = data.routes || [];
    const now = Date.now();
    if (!routes.length) {
      replace(el, h('h2', {}, 'Routes'), h('p', { class: 'muted' }, 'No routes: every request goes to the only upstream.'));
      return;
    }
    replace(el,
      h('h2', {}, 'Routes', h('span', { class: 'muted' }, ` ${routes.length} · first match wins`)),
      h('table', { class: 'routes' },
        h('thead', {}, h('tr', {}, ['#', 'match', 'upstream or split', 'rewrite, redirect, headers', 'rate limit'].map((c) => h('th', {}, c)))),
        h('tbody', {}, routes.slice(0, SHOWN).map((r) => routeRow(r, now)))),
      routes.length > SHOWN ? h('p', { class: 'muted small' }, `${routes.length - SHOWN} more routes not shown: GET /routes lists them all.`) : null);
  }, 1000);
  window.addEventListener('fulcrum:token', () => p.now());
}
