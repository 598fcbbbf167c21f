// ui.js: small DOM and drawing helpers shared by the pages.

// h builds an element: h('td', {class: 'x', onclick: f}, child, 'text', ...).
export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null || k === false) continue;
    el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return el;
}

const SVG = 'http://www.w3.org/2000/svg';

// spark draws values (oldest first) as an SVG polyline, scaled to the
// largest value, with the last value as a label.
export function spark(values, { width = 90, height = 22, cls = '', fmt = (v) => v.toFixed(1), title = '' } = {}) {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'spark ' + cls);
  svg.setAttribute('width', width);
  svg.setAttribute('height', height);
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  if (title) {
    const t = document.createElementNS(SVG, 'title');
    t.textContent = title;
    svg.append(t);
  }
  const vs = values.filter((v) => Number.isFinite(v));
  const top = Math.max(1e-9, ...vs);
  const n = Math.max(values.length - 1, 1);
  const pts = values.map((v, i) => `${(i / n * (width - 2) + 1).toFixed(1)},${(height - 1 - (Number.isFinite(v) ? v : 0) / top * (height - 2)).toFixed(1)}`);
  const line = document.createElementNS(SVG, 'polyline');
  line.setAttribute('points', pts.join(' '));
  svg.append(line);
  const wrap = h('span', { class: 'sparkwrap' }, svg, h('span', { class: 'sparkval' }, vs.length ? fmt(vs[vs.length - 1]) : '–'));
  return wrap;
}

// bar draws used/total as a horizontal bar; total 0 means unbounded.
export function bar(used, total, { label, warn = 0.8, cls = '' } = {}) {
  const frac = total > 0 ? Math.min(1, used / total) : 0;
  const state = total > 0 && frac >= 1 ? 'full' : (total > 0 && frac >= warn ? 'warn' : 'ok');
  const fill = h('span', { class: 'fill ' + state });
  fill.style.width = (frac * 100).toFixed(1) + '%';
  return h('span', { class: 'bar ' + cls, title: label || '' },
    fill, h('span', { class: 'barlabel' }, label ?? (total > 0 ? `${used} / ${total}` : `${used} / ∞`)));
}

// History keeps the last n samples per key for sparklines.
export class History {
  constructor(n = 60) { this.n = n; this.m = new Map(); }
  push(key, v) {
    let a = this.m.get(key);
    if (!a) { a = []; this.m.set(key, a); }
    a.push(v);
    if (a.length > this.n) a.shift();
    return a;
  }
  get(key) { return this.m.get(key) || []; }
}

// Rate turns a growing counter into a per-second rate between samples.
export class Rate {
  constructor() { this.last = new Map(); }
  rate(key, value, now) {
    const prev = this.last.get(key);
    this.last.set(key, { value, now });
    if (!prev || now <= prev.now || value < prev.value) return NaN;
    return (value - prev.value) / ((now - prev.now) / 1000);
  }
}

export function ago(ms) {
  if (!Number.isFinite(ms) || ms < 0) return '–';
  const s = ms / 1000;
  if (s < 1) return `${Math.round(ms)} ms`;
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

export function time(iso) {
  if (!iso) return '–';
  const d = new Date(iso);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// poll runs fn now and then every ms, never two at once; now() runs it
// again as soon as the current run ends; stop() ends it.
export function poll(fn, ms) {
  let timer = null, stopped = false, running = false, again = false;
  const tick = async () => {
    clearTimeout(timer);
    if (running) { again = true; return; }
    running = true;
    try { await fn(); } catch (e) { /* fn shows its own errors */ }
    running = false;
    if (stopped) return;
    if (again) { again = false; tick(); return; }
    timer = setTimeout(tick, ms);
  };
  tick();
  return { stop() { stopped = true; clearTimeout(timer); }, now: tick };
}

// replace swaps el's children for kids.
export function replace(el, ...kids) {
  el.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false));
}
