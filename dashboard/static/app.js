// sluice's operator page: polls the agent's GET /v1/overview once a second,
// each running migration's control-loop points (GET …/series?since=T), and
// draws them. Actions are the agent API's own POSTs. See package dashboard's
// doc for how the token reaches the page.
'use strict';

const TOKEN_KEY = 'sluice-token';
const POLL_MS = 1000;
const S = {
  token: null,
  series: {},   // migration id -> control-loop points, oldest first
  watched: {},  // ids of source-side migrations seen running: their cards stay after the end
  finalSeries: {}, // ids whose series was fetched once after they finished
  busy: false,
};

// ---- formatting --------------------------------------------------------

function fmtBytes(n) {
  if (n == null || n < 0) return '–';
  const u = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + ' ' + u[i];
}
function fmtRate(r) { return r > 0 ? fmtBytes(r) + '/s' : '–'; }
function fmtSecs(s) {
  if (s == null || s < 0) return '–';
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + ' min ' + Math.round(s % 60) + ' s';
  return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
}
function fmtMs(ms) { return ms == null || ms < 0 ? '–' : ms.toFixed(ms < 10 ? 2 : 1) + ' ms'; }
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
}

// parseRate reads "20MB/s", "512KiB/s", "1.5 GB" or "unlimited" as the
// API's rate in bytes/s (0 = unlimited); null when it cannot.
function parseRate(s) {
  s = s.trim();
  if (/^unlimited$/i.test(s)) return 0;
  const m = s.match(/^([0-9]*\.?[0-9]+)\s*([kmgt]?i?b)?(\/s)?$/i);
  if (!m) return null;
  const mult = { '': 1, b: 1, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3, tib: 1024 ** 4 };
  const f = mult[(m[2] || '').toLowerCase()];
  const v = parseFloat(m[1]) * f;
  return v > 0 ? v : null;
}

// ---- API ---------------------------------------------------------------

async function api(method, path, body) {
  const headers = {};
  if (S.token) headers['Authorization'] = 'Bearer ' + S.token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, { method, headers, cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await resp.json(); } catch (e) { /* not JSON */ }
  if (resp.status === 401) {
    showTokenForm(data && data.error);
    throw new Error('the agent wants its token');
  }
  if (!resp.ok) throw new Error((data && data.error) || resp.status + ' ' + resp.statusText);
  return data;
}

function showTokenForm(why) {
  const f = document.getElementById('token-form');
  f.classList.remove('hidden');
  if (why) document.getElementById('token-why').textContent = why;
}

function setStatus(text, bad) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.style.color = bad ? '#ff9b9b' : '';
}

// ---- polling -----------------------------------------------------------

async function tick() {
  if (S.busy) return;
  S.busy = true;
  try {
    const ov = await api('GET', '/v1/overview');
    document.getElementById('token-form').classList.add('hidden');
    const fetches = [];
    for (const m of ov.migrations) {
      if (m.role !== 'source') continue;
      if (!m.done) S.watched[m.id] = true;
      if (!S.watched[m.id]) continue;
      if (!m.done) fetches.push(loadSeries(m.id));
      else if (!S.finalSeries[m.id]) { S.finalSeries[m.id] = true; fetches.push(loadSeries(m.id)); }
    }
    await Promise.all(fetches);
    render(ov);
    document.body.dataset.updated = ov.time;
    setStatus('updated ' + new Date(ov.time).toLocaleTimeString());
  } catch (e) {
    setStatus(String(e.message || e), true);
  } finally {
    S.busy = false;
  }
}

async function loadSeries(id) {
  const have = S.series[id] || [];
  const since = have.length ? have[have.length - 1].t : -1;
  const pts = await api('GET', '/v1/migrations/' + encodeURIComponent(id) + '/series?since=' + since);
  S.series[id] = have.concat(pts || []);
}

// ---- rendering ---------------------------------------------------------

function render(ov) {
  document.getElementById('agent').textContent =
    'agent ' + ov.agent.name + ' · ' + ov.agent.url + ' · PostgreSQL ' + ov.agent.pg_version;
  const names = tenantNames(ov);
  renderRunning(ov, names);
  renderFinished(ov, names);
  renderTenants(ov);
  renderWindows(ov);
  renderKeyspaces(ov);
  renderPlans(ov);
}

function tenantNames(ov) {
  const n = {};
  for (const t of ov.tenants) n[t.id] = t.name;
  for (const p of ov.peers) for (const t of p.tenants) if (!(t.id in n)) n[t.id] = t.name;
  return n;
}

function tenantLabel(m, names) {
  return (names[m.tenant] ? names[m.tenant] + ' ' : '') + '#' + m.tenant;
}

function renderRunning(ov, names) {
  const box = document.getElementById('running');
  const shown = ov.migrations.filter(m => !m.done || S.watched[m.id]);
  const ids = new Set(shown.map(m => m.id));
  for (const card of box.querySelectorAll('section.migration')) {
    if (!ids.has(card.dataset.id)) card.remove();
  }
  box.querySelector('.empty').classList.toggle('hidden', shown.length > 0);
  for (const m of shown) {
    let card = document.getElementById('mig-' + m.id);
    if (!card) {
      card = document.getElementById('migration-card').content.firstElementChild.cloneNode(true);
      card.id = 'mig-' + m.id;
      card.dataset.id = m.id;
      wireActions(card, m.id);
      box.append(card);
    }
    updateCard(card, m, names);
  }
}

function updateCard(card, m, names) {
  const p = m.progress;
  const dir = m.role === 'source' ? '→ ' + m.peer : '← ' + m.peer;
  card.querySelector('.title').textContent = 'tenant ' + tenantLabel(m, names) + ' ' + dir + ' (' + m.mode + ', ' + m.role + ')';
  const phase = m.done ? (m.outcome === 'committed' ? 'done' : 'aborted') : p.phase + (p.paused ? ' (paused)' : '');
  const badge = card.querySelector('.phase');
  badge.textContent = phase;
  badge.className = 'phase badge ' + (m.done ? (m.outcome === 'committed' ? 'done' : 'aborted') : p.phase);
  card.querySelector('.mid').textContent = m.id;
  Object.assign(card.dataset, { phase: m.done ? m.outcome : p.phase, bytes: p.bytes, done: m.done,
    paused: !!p.paused, latencyMs: p.latency_ms == null ? '' : p.latency_ms });
  const f = name => card.querySelector('[data-f="' + name + '"]');
  f('bytes').textContent = fmtBytes(p.bytes) + (p.total_bytes > 0 ? ' of ' + fmtBytes(p.total_bytes) : '');
  f('rate').textContent = fmtRate(p.rate);
  f('limit').textContent = p.paused ? 'paused (resumes at ' + (p.limit > 0 ? fmtRate(p.limit) : 'unlimited') + ')'
    : (p.limit > 0 ? fmtRate(p.limit) : 'unlimited');
  f('eta').textContent = m.done ? '–' : fmtSecs(p.eta_seconds);
  f('lag').textContent = p.lag_bytes >= 0 && p.phase !== 'snapshot' ? fmtBytes(p.lag_bytes) : '–';
  f('elapsed').textContent = fmtSecs(p.elapsed_seconds);
  f('latency').textContent = p.controller
    ? fmtMs(p.latency_ms) + ' / ' + fmtMs(p.setpoint_ms) : '– (no control loop)';
  f('controller').textContent = p.controller
    ? p.controller + (p.profile ? ' · ' + p.profile : '') + (p.max_rate ? ' · top ' + fmtRate(p.max_rate) : '') : 'fixed rate';
  const frac = m.done ? 1 : (p.total_bytes > 0 ? Math.min(1, p.bytes / p.total_bytes) : 0);
  card.querySelector('.bar .fill').style.width = (100 * frac).toFixed(1) + '%';
  card.querySelector('.note').textContent = [p.action, p.warning, p.waiting, m.error].filter(Boolean).join(' · ');
  const sum = card.querySelector('.summary');
  if (m.summary) {
    const s = m.summary;
    sum.textContent = s.outcome + ': ' + fmtBytes(s.bytes) + ' in ' + fmtSecs(s.seconds) +
      (m.mode === 'stop-and-copy' ? ', downtime ' + fmtMs(s.downtime_ms) : ', freeze at handover ' + fmtMs(s.freeze_ms));
    sum.dataset.outcome = s.outcome;
    sum.dataset.freezeMs = s.freeze_ms;
  }
  const acts = card.querySelector('.actions');
  const live = !m.done && m.role === 'source';
  acts.classList.toggle('hidden', !live);
  acts.elements.pause.disabled = !!p.paused || !(p.phase === 'prepare' || p.phase === 'snapshot');
  acts.elements.resume.disabled = !p.paused;
  drawChart(card.querySelector('canvas'), S.series[m.id] || [], m);
}

function wireActions(card, id) {
  const form = card.querySelector('.actions');
  const out = form.querySelector('.result');
  const act = async (path, body) => {
    out.textContent = '…';
    try {
      await api('POST', '/v1/migrations/' + encodeURIComponent(id) + path, body);
      out.textContent = 'done';
      tick();
    } catch (e) { out.textContent = String(e.message || e); }
  };
  form.addEventListener('submit', ev => {
    ev.preventDefault();
    const r = parseRate(form.elements.rate.value);
    if (r === null) { out.textContent = 'a rate is e.g. 20MB/s, 512KiB/s or unlimited (0 would stall the copy: pause it)'; return; }
    act('/rate', { rate: r });
  });
  form.elements.pause.addEventListener('click', () => act('/pause'));
  form.elements.resume.addEventListener('click', () => act('/resume'));
  form.elements.abort.addEventListener('click', () => {
    if (confirm('Abort migration ' + id + '? It rolls back; the tenant keeps serving from its source.')) act('/abort');
  });
}

function renderFinished(ov, names) {
  const rows = ov.migrations.filter(m => m.done && m.summary).map(m => {
    const s = m.summary;
    const from = m.role === 'source' ? ov.agent.name : m.peer, to = m.role === 'source' ? m.peer : ov.agent.name;
    const tr = el('tr', { 'data-id': m.id, 'data-outcome': s.outcome },
      el('td', {}, m.id), el('td', {}, tenantLabel(m, names)), el('td', {}, from + ' → ' + to),
      el('td', { class: 'outcome-' + s.outcome }, s.outcome), el('td', { class: 'num' }, fmtBytes(s.bytes)),
      // The source drives a migration and times it; a target's record
      // has no times of its own.
      el('td', { class: 'num' }, m.role === 'source' ? fmtSecs(s.seconds) : 'see ' + m.peer),
      el('td', { class: 'num' }, m.role !== 'source' ? '–' : m.mode === 'stop-and-copy' ? 'down ' + fmtMs(s.downtime_ms) : fmtMs(s.freeze_ms)),
      el('td', {}, new Date(m.updated).toLocaleString()));
    return tr;
  });
  fill('finished', rows, 8, 'No finished migration yet.');
}

function renderTenants(ov) {
  const rows = [];
  const add = (t, agent) => rows.push(el('tr', { 'data-tenant': t.name },
    el('td', {}, t.name), el('td', { class: 'num' }, t.id), el('td', {}, agent), el('td', {}, t.state),
    el('td', {}, t.served_at || (t.host + ':' + t.port)), el('td', {}, t.alive ? 'up' : 'down'),
    el('td', {}, t.migration || '')));
  for (const t of ov.tenants) add(t, ov.agent.name);
  for (const p of ov.peers) {
    for (const t of p.tenants) add(t, p.name);
    if (p.error) rows.push(el('tr', {}, el('td', { colspan: 7, class: 'muted' }, 'peer ' + p.name + ': ' + p.error)));
  }
  fill('tenants', rows, 7, 'No tenant.');
}

function renderWindows(ov) {
  const note = document.getElementById('proxy-note');
  if (!ov.proxy) { note.textContent = 'This agent has no proxy configured.'; fill('windows', [], 8, ''); return; }
  note.textContent = 'proxy ' + ov.proxy.url + (ov.proxy.error ? ' — ' + ov.proxy.error : '');
  const rows = ov.proxy.windows.map(w => el('tr', { 'data-tenant': w.tenant },
    el('td', {}, w.tenant), el('td', { class: 'num' }, w.window_s + ' s'), el('td', { class: 'num' }, w.count),
    el('td', { class: 'num' }, fmtMs(w.mean_ms)), el('td', { class: 'num' }, fmtMs(w.p50_ms)),
    el('td', { class: 'num' }, fmtMs(w.p95_ms)), el('td', { class: 'num' }, fmtMs(w.p99_ms)),
    el('td', { class: 'num' }, fmtMs(w.queue_ms))));
  fill('windows', rows, 8, 'No transaction in the window.');
}

function renderKeyspaces(ov) {
  const rows = ov.keyspaces.map(kv => {
    const ks = kv.keyspace, r = kv.reshard;
    const parts = ks.partitions.map(p => p.name + ': ' + p.tenant + '@' + (p.agent || ov.agent.name)).join(', ');
    let phase = 'none', prog = '', pace = '';
    if (r) {
      phase = r.phase + ' (epoch ' + r.from_epoch + ' → ' + r.to_epoch + ', ' + r.method + ')';
      const g = r.progress || {};
      prog = (g.complete || 0) + ' of ' + (g.chunks || 0) + ' chunks, ' + fmtBytes(r.bytes_copied) + ' copied';
      pace = (r.rate > 0 ? fmtRate(r.rate) : r.rate < 0 ? 'unlimited' : 'paused') +
        (r.setpoint_ms ? ' · ' + fmtMs(r.latency_ms) + ' / ' + fmtMs(r.setpoint_ms) : '');
      if (r.phase === 'done' || r.error) pace = r.error || ('switch ' + fmtMs(r.switch_ms));
    }
    return el('tr', { 'data-keyspace': ks.name }, el('td', {}, ks.name), el('td', { class: 'num' }, ks.epoch),
      el('td', {}, parts), el('td', {}, phase), el('td', {}, prog), el('td', {}, pace));
  });
  fill('keyspaces', rows, 6, 'No keyspace.');
}

function renderPlans(ov) {
  const rows = (ov.plans || []).map(p => {
    const done = p.moves.filter(m => m.status === 'done').length;
    let pace = p.state === 'running' || p.state === 'paused'
      ? (p.rate > 0 ? fmtRate(p.rate) : p.rate < 0 ? 'unlimited' : 'held') + ' · ETA ' + fmtSecs(p.eta_seconds)
      : fmtSecs(p.elapsed_seconds);
    if (p.worst_store) pace += ' · worst ' + p.worst_store + ' ' + fmtMs(p.worst_latency_ms) + ' / ' + fmtMs(p.worst_contract_ms);
    return el('tr', { 'data-plan': p.id }, el('td', {}, p.id), el('td', {}, p.method), el('td', {}, p.state),
      el('td', { class: 'num' }, done + ' of ' + p.moves.length),
      el('td', { class: 'num' }, fmtBytes(p.moved_bytes_total) + (p.bytes > 0 ? ' of ' + fmtBytes(p.bytes) : '')),
      el('td', {}, pace));
  });
  fill('plans', rows, 6, 'No plan.');
}

function fill(id, rows, cols, empty) {
  const tb = document.querySelector('#' + id + ' tbody');
  if (!rows.length && empty) rows = [el('tr', {}, el('td', { colspan: cols, class: 'muted' }, empty))];
  tb.replaceChildren(...rows);
}

// ---- chart -------------------------------------------------------------

const PHASE_COLORS = { prepare: '#f1f3f7', snapshot: '#eef4fd', 'catch-up': '#eef8f2', warm: '#fdf6ea',
  handover: '#fbe1bd', cleanup: '#f1f3f7', rollback: '#fbe4e4' };

// drawChart draws two panels over the loop's points: the clients' latency
// against the setpoint (top) and the rate the controller decided (bottom),
// on the phases as background bands; the handover's freeze is written on
// its band once the migration has finished.
function drawChart(cv, pts, m) {
  const dpr = window.devicePixelRatio || 1;
  const W = cv.clientWidth || 900, H = cv.clientHeight || 300;
  if (cv.width !== Math.round(W * dpr)) { cv.width = Math.round(W * dpr); cv.height = Math.round(H * dpr); }
  const g = cv.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, W, H);
  g.font = '11px system-ui, sans-serif';
  if (!pts.length) {
    g.fillStyle = '#6a7382';
    g.fillText(m.progress.controller ? 'waiting for the control loop\'s first step…' : 'no control loop: the migration runs at a fixed rate', 12, 20);
    return;
  }
  const L = 58, R = 12, T = 18, gap = 26, ph = (H - T - gap - 22) / 2;
  const t0 = pts[0].t, t1 = Math.max(pts[pts.length - 1].t, t0 + 1);
  const x = t => L + (t - t0) / (t1 - t0) * (W - L - R);
  const panels = [{ y0: T, label: 'latency (ms)' }, { y0: T + ph + gap, label: 'rate (MB/s)' }];
  // Phase bands.
  let start = 0;
  for (let i = 1; i <= pts.length; i++) {
    if (i === pts.length || pts[i].phase !== pts[start].phase) {
      const a = x(pts[start].t), b = x(i < pts.length ? pts[i].t : t1);
      g.fillStyle = PHASE_COLORS[pts[start].phase] || '#f4f4f4';
      for (const p of panels) g.fillRect(a, p.y0, Math.max(b - a, 2), ph);
      if (b - a > 40) { g.fillStyle = '#6a7382'; g.fillText(pts[start].phase, a + 3, panels[1].y0 + ph - 4); }
      if (pts[start].phase === 'handover' && m.summary) {
        g.fillStyle = '#b36b00';
        g.fillText('freeze ' + fmtMs(m.summary.freeze_ms), Math.min(a + 3, W - R - 90), T + 12);
      }
      start = i;
    }
  }
  const lat = pts.map(p => p.latency_ms), sp = pts.map(p => p.setpoint_ms);
  const latMax = Math.max(1, ...lat.filter(v => v >= 0), ...sp.map(v => v * 1.5));
  const rates = pts.map(p => p.rate / 1e6);
  const rateMax = Math.max(0.1, ...rates) * 1.1;
  axes(g, panels[0], ph, latMax, L, W - R, 'latency (ms)');
  axes(g, panels[1], ph, rateMax, L, W - R, 'rate decided (MB/s)');
  const yOf = (p, v, max) => p.y0 + ph - v / max * ph;
  line(g, pts, p => x(p.t), p => p.setpoint_ms > 0 ? yOf(panels[0], p.setpoint_ms, latMax) : null, '#d23c3c', [6, 4]);
  line(g, pts, p => x(p.t), p => p.latency_ms >= 0 ? yOf(panels[0], Math.min(p.latency_ms, latMax), latMax) : null, '#2f6fdb');
  line(g, pts, p => x(p.t), p => yOf(panels[1], p.rate / 1e6, rateMax), '#1f9a5b');
  // Legend and time axis.
  g.fillStyle = '#2f6fdb'; g.fillText('— clients\' latency', L + 4, T - 5);
  g.fillStyle = '#d23c3c'; g.fillText('- - setpoint', L + 120, T - 5);
  g.fillStyle = '#1f9a5b'; g.fillText('— rate the controller set', L + 4, panels[1].y0 - 5);
  g.fillStyle = '#6a7382';
  g.fillText(t0.toFixed(0) + ' s', L, H - 6);
  g.fillText(t1.toFixed(0) + ' s', W - R - 30, H - 6);
}

function axes(g, p, ph, max, x0, x1, label) {
  g.strokeStyle = '#c8ced8'; g.lineWidth = 1; g.setLineDash([]);
  g.strokeRect(x0, p.y0, x1 - x0, ph);
  g.fillStyle = '#6a7382';
  for (const f of [0, 0.5, 1]) {
    const y = p.y0 + ph - f * ph;
    g.fillText((max * f).toFixed(max * f < 10 ? 1 : 0), 6, y + 4);
  }
}

function line(g, pts, fx, fy, color, dash) {
  g.strokeStyle = color; g.lineWidth = 1.8; g.setLineDash(dash || []);
  g.beginPath();
  let pen = false;
  for (const p of pts) {
    const y = fy(p);
    if (y === null) { pen = false; continue; }
    if (pen) g.lineTo(fx(p), y); else g.moveTo(fx(p), y);
    pen = true;
  }
  g.stroke();
  g.setLineDash([]);
}

// ---- start -------------------------------------------------------------

// takeToken moves a token in the URL's fragment (#token=…) to the tab's
// sessionStorage and out of the address bar.
function takeToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  S.token = sessionStorage.getItem(TOKEN_KEY);
}

function start() {
  takeToken();
  window.addEventListener('hashchange', () => { takeToken(); tick(); });
  document.getElementById('token-form').addEventListener('submit', ev => {
    ev.preventDefault();
    const v = document.getElementById('token-input').value.trim();
    if (!v) return;
    sessionStorage.setItem(TOKEN_KEY, v);
    S.token = v;
    document.getElementById('token-form').classList.add('hidden');
    tick();
  });
  tick();
  setInterval(tick, POLL_MS);
}

document.addEventListener('DOMContentLoaded', start);
