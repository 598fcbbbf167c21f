// Browser checks of the web console, one scenario per component, driven by
// console/e2e_test.go, which starts the real components and passes their
// addresses in FULCRUM_E2E (JSON). The Go test's control server does what
// a browser cannot (kill a target, create a task, stop a worker) and then
// checks the actions' effects on the components themselves.
//
//   node run.mjs gateway|routes|flow|supervisor|demo
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const scenario = process.argv[2];
const env = JSON.parse(process.env.FULCRUM_E2E || '{}');
const STEP = 30_000; // a bound on a hang, not a claim about speed

function log(...a) { console.log(`[${scenario}]`, ...a); }

async function control(what, body = {}) {
  const r = await fetch(env.control + '/' + what, { method: 'POST', body: JSON.stringify(body) });
  const text = await r.text();
  if (!r.ok) throw new Error(`control ${what}: ${r.status} ${text}`);
  return JSON.parse(text || '{}');
}

const profile = mkdtempSync(join(tmpdir(), 'fulcrum-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env.chromium || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1360, height: 860 },
});
const page = context.pages()[0] || await context.newPage();
page.setDefaultTimeout(STEP);

// Every console error and uncaught exception fails the scenario, except
// the 401s a scenario provokes on purpose (allow401).
let allow401 = false;
const errors = [];
page.on('console', (m) => {
  if (m.type() !== 'error') return;
  if (allow401 && /status of 401/.test(m.text())) return;
  errors.push('console: ' + m.text());
});
page.on('pageerror', (e) => errors.push('page error: ' + e.message));

async function shot(name) {
  if (!env.screenshots) return;
  // Cosmetic only: let the sparklines gather a few points first.
  await page.waitForFunction(() => [...document.querySelectorAll('svg.spark polyline')]
    .every((l) => l.getAttribute('points').split(' ').length >= 6), null, { timeout: 20_000 }).catch(() => {});
  await page.screenshot({ path: join(env.screenshots, `console-${name}.png`), fullPage: true });
  log('screenshot', name);
}

async function useToken(tok) {
  await page.fill('#token', tok);
  await page.click('#token-form button');
}

const scenarios = {
  async gateway() {
    allow401 = true;
    await page.goto(env.url + '/ui/');
    await page.waitForSelector('#banner[data-kind="refused"]');
    log('no token: refused banner shown');
    await useToken(env.token);
    await page.waitForFunction((n) => document.querySelectorAll('tr[data-state="healthy"]').length === n, env.targets.length);
    await page.waitForSelector('#banner[data-kind="refused"]', { state: 'hidden' });
    allow401 = false;
    log('token accepted: all targets healthy');

    const killed = await control('kill-target');
    await page.waitForSelector(`tr[data-target="${killed.addr}"][data-state="unhealthy"]`);
    log('killed target turned unhealthy:', killed.addr);

    const other = env.targets.find((a) => a !== killed.addr);
    await page.click(`tr[data-target="${other}"] button.disable`);
    await page.waitForSelector(`tr[data-target="${other}"][data-state="disabled"]`);
    await control('check-disabled', { addr: other });
    log('disabled through the page:', other);
    await shot('gateway');
  },

  // A gateway with a 70/30 split whose v2 answers every 4th request with
  // a 500: the routes card shows both sides counting, v2's 5xx against
  // v1's none, a ramping side's progress and a rate limit; once the
  // traffic stops, exactly the gateway's counts.
  async routes() {
    allow401 = true;
    await page.goto(env.url + '/ui/');
    await page.waitForSelector('#banner[data-kind="refused"]');
    await useToken(env.token);
    const side = (route, up) => `#routes tr.side[data-route="${route}"][data-upstream="${up}"]`;
    const [v1, v2] = [side(env.split, 'v1'), side(env.split, 'v2')];
    await page.waitForSelector(v1);
    await page.waitForSelector('#banner[data-kind="refused"]', { state: 'hidden' });
    allow401 = false;
    await page.waitForFunction((sels) => sels.every((s) => Number(document.querySelector(s + ' .requests')?.textContent) > 0), [v1, v2]);
    log('both sides of the split counting requests');
    await page.waitForSelector(`${v2}[data-worse="true"]`);
    if (await page.textContent(`${v1} .errors`) !== '0') throw new Error('the healthy side shows 5xx answers');
    log('the canary\'s 5xx shown against the healthy side\'s none');
    await page.waitForSelector(`${side(env.ramp, 'v2')} td.ramp .bar`);
    await page.waitForSelector(`#routes tr.route[data-route="${env.limited}"] .limited`);
    log('a ramping side and a rate limit shown');
    await shot('gateway-routes');

    const want = await control('stop-traffic');
    await page.waitForFunction(([want, sel]) => Object.entries(want).every(([up, w]) => {
      const row = document.querySelector(sel.replace('UP', up));
      return row && ['requests', 'errors', 'responses'].every((k) => Number(row.querySelector('.' + k).textContent) === w[k]);
    }), [want, side(env.split, 'UP')]);
    log('the page shows the gateway\'s counts:', JSON.stringify(want));
  },

  async flow() {
    allow401 = true;
    await page.goto(env.url + '/ui/');
    await page.waitForSelector('#banner[data-kind="refused"]');
    await useToken(env.token);
    const card = `section[data-type="${env.taskType}"]`;
    await page.waitForSelector(`${card} table.funnel tr[data-stage]`);
    await page.waitForSelector('#banner[data-kind="refused"]', { state: 'hidden' });
    allow401 = false;
    log('token accepted: type card with its funnel shown');

    const before = Number(await page.textContent(`${card} .n[data-status="pending"]`));
    const created = await control('create-task');
    await page.waitForFunction(([sel, n]) => Number(document.querySelector(sel)?.textContent) === n,
      [`${card} .n[data-status="pending"]`, before + 1]);
    log('created task counted as pending:', created.task_id);

    await page.goto(env.url + `/ui/#tasks?task_type=${env.taskType}&status=pending`);
    await page.waitForSelector(`tr[data-task="${created.task_id}"]`);
    await page.click(`tr[data-task="${created.task_id}"] a`);
    await page.waitForSelector('.taskactions button.cancel');
    await page.waitForSelector('pre.context');
    await page.click('.taskactions button.cancel');
    await page.waitForSelector('dd [data-status="cancelled"]');
    await control('check-status', { task_id: created.task_id, status: 'cancelled' });
    log('cancelled through the page');
    if (env.actions.retry_task) {
      await page.click('.taskactions button.retry');
      await page.waitForSelector('dd [data-status="pending"]');
      await control('check-status', { task_id: created.task_id, status: 'pending' });
      log('retried through the page');
      await page.click('.taskactions button.cancel');
      await page.waitForSelector('dd [data-status="cancelled"]');
    }
    await shot('flow-task');
    const parent = await control('fan-out');
    await page.goto(env.url + '/ui/#task/' + parent.task_id);
    await page.waitForSelector('dd [data-status="waiting"]');
    await page.waitForFunction(() => document.querySelectorAll('table.children tbody tr').length === 3);
    log('fan-out parent shown waiting, with its three children');
    await page.goto(env.url + '/ui/#');
    await page.waitForSelector(`${card} .n[data-status="cancelled"]`);
    if (env.actions.pause_task_type) {
      await page.click(`${card} button.pause`);
      await page.waitForSelector(`${card}[data-paused="true"] .badge.paused`);
      await control('check-paused', { paused: true });
      await page.click(`${card} button.resume`);
      await page.waitForSelector(`${card}[data-paused="false"]`);
      await control('check-paused', { paused: false });
      log('paused and resumed through the page');
    }
    const paused = await control('pause-key');
    await page.waitForSelector(`${card} .pausedkeys [data-ratekey="${paused.rate_key}"]`);
    log('a paused rate key shown on its type:', paused.rate_key);
    await page.waitForSelector('section[data-type="thumbnails"] .fairness [data-fairkey="premium"]');
    log('a fair type shows its fairness weights');
    await shot('flow');
    if (env.actions.delete_task) {
      await page.goto(env.url + '/ui/#task/' + created.task_id);
      page.once('dialog', (d) => d.accept());
      await page.click('.taskactions button.delete');
      await page.waitForSelector('form.filters');
      await page.waitForSelector('table.tasks');
      if (await page.$(`tr[data-task="${created.task_id}"]`)) throw new Error('deleted task still listed');
      await control('check-deleted', { task_id: created.task_id });
      log('deleted through the page');
    }
  },

  async supervisor() {
    allow401 = true;
    await page.goto(env.url + '/ui/');
    await page.waitForSelector('#banner[data-kind="refused"]');
    await useToken(env.token);
    await page.waitForFunction((n) => document.querySelectorAll('tr[data-worker]').length === n, env.workers.length);
    await page.waitForSelector('#banner[data-kind="refused"]', { state: 'hidden' });
    allow401 = false;
    await page.waitForFunction(() => document.querySelectorAll('tr.task').length > 0 && !document.querySelector('tr.task.deficit'));
    log('all workers shown, every task fully held');

    const killed = await control('kill-worker');
    await page.waitForSelector(`tr[data-worker="${killed.worker}"]`, { state: 'detached' });
    await page.waitForSelector(`ol.events li.death`);
    log('stopped worker disappeared:', killed.worker);
    if (env.actions.drain) {
      const w = env.workers[0];
      page.once('dialog', (d) => d.accept());
      await page.click(`tr[data-worker="${w}"] button.drain`);
      await page.waitForSelector(`tr[data-worker="${w}"][data-draining="true"]`);
      await control('check-draining', { worker: w });
      log('drained through the page:', w);
    }
    await shot('supervisor');
  },

  // `fulcrum demo`: the printed console address shows the three targets,
  // healthy, their request counts growing.
  async demo() {
    await page.goto(env.url + '/ui/');
    const rows = env.targets.map((a) => `tr[data-target="${a}"][data-state="healthy"]`);
    for (const r of rows) await page.waitForSelector(r);
    const served = () => page.$$eval('tr[data-target] .small', (els) => els.map((e) => Number(e.textContent.split(' of ')[1])));
    const first = await served();
    await page.waitForFunction((before) => [...document.querySelectorAll('tr[data-target] .small')]
      .every((e, i) => Number(e.textContent.split(' of ')[1]) > before[i]), first);
    log('three demo targets shown live:', env.targets.join(', '));
  },
};

let code = 0;
try {
  if (!scenarios[scenario]) throw new Error(`unknown scenario ${scenario}`);
  await scenarios[scenario]();
  if (errors.length) throw new Error('errors in the page:\n  ' + errors.join('\n  '));
  log('ok');
} catch (e) {
  code = 1;
  console.error(`[${scenario}] FAILED: ${e.message}`);
  try { await page.screenshot({ path: join(env.failures || tmpdir(), `console-${scenario}-failure.png`), fullPage: true }); } catch {}
  try { console.error('page text:\n' + (await page.innerText('body')).slice(0, 3000)); } catch {}
}
await context.close();
rmSync(profile, { recursive: true, force: true });
process.exit(code);
