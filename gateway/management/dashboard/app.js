// The dashboard: a small single-page app over the management API (/api/), no framework.
// Every view is {title, mount(el), refresh()}; the visible one is refreshed every 5 s.
import { lineChart, formatNumber, formatBytes } from './chart.js';

const AUTH_KEY = 'gateway.dashboard.auth';
const REFRESH_MS = 5000;
const WINDOW_S = 600; // the charts show the last ten minutes

// --- DOM helpers ------------------------------------------------------------------------
const $ = (sel, root = document) => root.querySelector(sel);

/** h('td', {class: 'num', 'data-testid': 'x', onclick: fn}, 'text', child, [more]) */
function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else if (k === 'class') node.className = v;
    else if (k in node && typeof v !== 'string') node[k] = v;
    else node.setAttribute(k, v === true ? '' : v);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : String(child));
  }
}

const tag = (text, color = '') => h('span', { class: `tag ${color}`.trim() }, text);
const num = (value, attrs = {}) => h('td', { class: 'num', ...attrs }, value === null || value === undefined ? '–' : String(value));
const enc = encodeURIComponent;
const defaultName = (name) => (name === '' ? '(AMQP default)' : name);

function table(testid, headers, rows, empty = 'Nothing here yet.') {
  return h('table', { 'data-testid': testid },
    h('thead', {}, h('tr', {}, headers.map((hd) => (typeof hd === 'string'
      ? h('th', {}, hd) : h('th', { class: hd.num ? 'num' : '' }, hd.label))))),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { class: 'empty', colspan: headers.length }, empty))));
}

function panel(title, ...children) {
  const head = Array.isArray(title) ? title : [h('h3', {}, title)];
  return h('section', { class: 'panel' }, h('div', { class: 'panel-head' }, head), children);
}

/** "a=1\nb=x" (or a JSON object) as an object; ``typed`` turns numbers and booleans into JSON values. */
function parsePairs(text, typed) {
  const trimmed = text.trim();
  if (!trimmed) return {};
  if (trimmed.startsWith('{')) {
    const doc = JSON.parse(trimmed);
    if (typeof doc !== 'object' || Array.isArray(doc)) throw new Error('expected a JSON object');
    return doc;
  }
  const out = {};
  for (const line of trimmed.split(/\n|,(?=[^,=]+=)/)) {
    if (!line.trim()) continue;
    const at = line.indexOf('=');
    if (at < 1) throw new Error(`"${line.trim()}" is not key=value`);
    const key = line.slice(0, at).trim();
    const raw = line.slice(at + 1).trim();
    let value = raw;
    if (typed) {
      if (/^-?\d+$/.test(raw)) value = Number(raw);
      else if (raw === 'true' || raw === 'false') value = raw === 'true';
    }
    out[key] = value;
  }
  return out;
}

function clockTime(date = new Date()) {
  return date.toLocaleTimeString([], { hour12: false });
}

// --- the API ------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, error, reason) {
    super(`${status} ${error}${reason ? `: ${reason}` : ''}`);
    this.status = status;
    this.error = error;
    this.reason = reason;
  }
}

let auth = null;
try { auth = JSON.parse(sessionStorage.getItem(AUTH_KEY) || 'null'); } catch { auth = null; }

function basicToken(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return `Basic ${btoa(binary)}`;
}

async function api(method, path, body, token = auth && auth.token) {
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    // credentials 'omit': the browser neither adds its own credentials nor pops up its
    // basic-auth dialog on a 401; the Authorization header above is still sent.
    response = await fetch(`/api${path}`, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit', cache: 'no-store',
    });
  } catch (exc) {
    throw new ApiError(0, 'network_error', `the broker did not answer (${exc.message})`);
  }
  const text = await response.text();
  let doc = null;
  if (text) {
    try { doc = JSON.parse(text); } catch { doc = null; }
  }
  if (!response.ok) {
    const error = (doc && doc.error) || response.statusText || 'error';
    const reason = (doc && doc.reason) || (doc ? '' : text.trim().slice(0, 200));
    const exc = new ApiError(response.status, error, reason);
    // A 401 with a challenge is a failed login (the session's credentials no longer work); one
    // without is RabbitMQ's "this user may not do that" and keeps the session.
    const login = response.headers.get('www-authenticate');
    if (response.status === 401 && login && token && auth && token === auth.token) sessionExpired(exc);
    throw exc;
  }
  return doc;
}

// --- messages to the user -----------------------------------------------------------------
let bannerFromRefresh = false;

function showError(exc, fromRefresh = false) {
  const text = exc instanceof ApiError ? `${exc.message}` : `Error: ${exc.message || exc}`;
  $('[data-testid=error-text]').textContent = text;
  $('[data-testid=error-banner]').hidden = false;
  bannerFromRefresh = fromRefresh;
}

function clearError(onlyRefresh = false) {
  if (onlyRefresh && !bannerFromRefresh) return;
  $('[data-testid=error-banner]').hidden = true;
}

let noticeTimer = null;
let noticeAt = 0;
function notice(text) {
  const el = $('[data-testid=notice]');
  el.textContent = text;
  el.hidden = false;
  noticeAt = Date.now();
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { el.hidden = true; }, 8000);
}

/** Hides the last notice, unless it was just given (by the action that changes the view). */
function clearNotice(always = true) {
  if (always || Date.now() - noticeAt > 1500) $('[data-testid=notice]').hidden = true;
}

function confirmAction(text) {
  const dialog = $('#confirm');
  $('[data-testid=confirm-text]').textContent = text;
  dialog.returnValue = '';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.showModal();
  });
}

/** Runs an action (a click, a form); shows its error and returns null on failure. */
async function act(fn, button = null) {
  clearError();
  if (button) button.disabled = true;
  try {
    return await fn();
  } catch (exc) {
    showError(exc);
    return null;
  } finally {
    if (button) button.disabled = false;
  }
}

// --- views --------------------------------------------------------------------------------
const CHARTS = [
  {
    testid: 'chart-message-rates', title: 'Message rates (per second)', format: formatNumber,
    series: [['amqp_published_rate', 'AMQP publish'], ['amqp_delivered_rate', 'AMQP deliver'],
      ['amqp_acked_rate', 'AMQP ack'], ['kafka_records_in_rate', 'Kafka records in']],
  },
  {
    testid: 'chart-kafka-bytes', title: 'Kafka traffic (bytes per second)', format: (v) => `${formatBytes(v)}/s`,
    series: [['kafka_bytes_in_rate', 'in'], ['kafka_bytes_out_rate', 'out']],
  },
  {
    testid: 'chart-queue-depth', title: 'Queue depth (messages)', integer: true,
    series: [['queue_messages', 'total'], ['queue_unacked', 'unacknowledged']],
  },
  {
    testid: 'chart-consumer-lag', title: 'Consumer lag (records behind)', integer: true,
    series: [['group_lag', 'all groups']],
  },
  {
    testid: 'chart-connections', title: 'Connections', integer: true,
    series: [['connections', 'AMQP + Kafka']],
  },
];

const TOTALS = [
  ['connections', 'Connections'], ['channels', 'Channels'], ['exchanges', 'Exchanges'], ['queues', 'Queues'],
  ['consumers', 'Consumers'], ['topics', 'Topics'], ['groups', 'Consumer groups'],
];
const QUEUE_TOTALS = [['messages', 'Messages'], ['messages_ready', 'Ready'], ['messages_unacknowledged', 'Unacked']];
const RATES = [
  ['publish', 'Publish /s', formatNumber], ['deliver_get', 'Deliver /s', formatNumber], ['ack', 'Ack /s', formatNumber],
  ['kafka_records_in', 'Kafka records in /s', formatNumber],
  ['kafka_bytes_in', 'Kafka in', (v) => `${formatBytes(v)}/s`], ['kafka_bytes_out', 'Kafka out', (v) => `${formatBytes(v)}/s`],
];

function card(testid, label, value) {
  return h('div', { class: 'card', 'data-testid': testid }, h('div', { class: 'value' }, value), h('div', { class: 'label' }, label));
}

function overviewView() {
  let el;
  return {
    title: 'Overview',
    mount(root) {
      el = {
        totals: h('div', { class: 'cards', 'data-testid': 'overview-totals' }),
        rates: h('div', { class: 'cards', 'data-testid': 'overview-rates' }),
        charts: CHARTS.map((c) => h('div', { 'data-testid': `${c.testid}-box` })),
        listeners: h('div'),
      };
      root.append(
        el.totals, el.rates,
        h('div', { class: 'charts' }, CHARTS.map((c, i) => panel([h('h3', {}, c.title),
          h('span', { class: 'muted small chart-window' }, 'last 10 minutes')], el.charts[i]))),
        h('div', { class: 'spacer' }),
        panel('Listeners', el.listeners),
      );
    },
    async refresh() {
      const [overview, history] = await Promise.all([api('GET', '/overview'), api('GET', '/history')]);
      $('[data-testid=node-name]').textContent = `${overview.node} · ${overview.cluster_name}`;
      el.totals.replaceChildren(
        ...TOTALS.map(([k, label]) => card(`total-${k}`, label, String(overview.object_totals[k] ?? 0))),
        ...QUEUE_TOTALS.map(([k, label]) => card(`total-${k}`, label, String(overview.queue_totals[k] ?? 0))),
      );
      const stats = overview.message_stats || {};
      el.rates.replaceChildren(...RATES.map(([k, label, fmt]) => card(`rate-${k}`, label,
        fmt((stats[`${k}_details`] || {}).rate || 0))));
      const samples = history.samples || [];
      const to = samples.length ? samples[samples.length - 1].time : Date.now() / 1000;
      // ten minutes, or less while the broker is younger than that (two minutes at least)
      const span = Math.min(WINDOW_S, Math.max(120, to - (samples.length ? samples[0].time : to)));
      const from = to - span;
      const label = span >= WINDOW_S ? 'last 10 minutes' : `last ${Math.ceil(span / 60)} minutes (since start)`;
      for (const node of document.querySelectorAll('.chart-window')) node.textContent = label;
      CHARTS.forEach((c, i) => lineChart(el.charts[i], {
        testid: c.testid, from, to, format: c.format || formatNumber, integer: !!c.integer,
        series: c.series.map(([key, label]) => ({ key, label, values: samples.map((s) => [s.time, s[key] || 0]) })),
      }));
      el.listeners.replaceChildren(table('listeners-table', ['Protocol', 'Address', 'Port'],
        (overview.listeners || []).map((l) => h('tr', {}, h('td', {}, l.protocol), h('td', {}, l.ip_address), num(l.port)))));
    },
  };
}

function topicsView() {
  let list;
  let showInternal;
  return {
    title: 'Topics',
    mount(root) {
      const form = h('form', { 'data-testid': 'topic-create-form' },
        h('div', { class: 'form-row' },
          h('label', {}, 'Name', h('input', { name: 'name', required: true, 'data-testid': 'topic-name', placeholder: 'orders' })),
          h('label', { class: 'narrow' }, 'Partitions',
            h('input', { name: 'partitions', type: 'number', min: '1', value: '1', 'data-testid': 'topic-partitions' })),
          h('label', { class: 'wide' }, 'Configs (key=value, optional)',
            h('input', { name: 'configs', 'data-testid': 'topic-configs', placeholder: 'retention.ms=86400000, cleanup.policy=compact' })),
          h('button', { type: 'submit', class: 'primary', 'data-testid': 'topic-create' }, 'Create topic')));
      form.addEventListener('submit', (event) => {
        event.preventDefault();
        const data = new FormData(form);
        const name = data.get('name').trim();
        act(async () => {
          const partitions = Number(data.get('partitions'));
          const configs = parsePairs(data.get('configs'), false);
          await api('PUT', `/topics/${enc(name)}`, { partitions, configs });
          notice(`Topic "${name}" created with ${partitions} partition${partitions === 1 ? '' : 's'}.`);
          form.reset();
          await refreshNow();
        }, event.submitter);
      });
      showInternal = h('input', { type: 'checkbox', 'data-testid': 'topics-show-internal', onchange: () => refreshNow() });
      list = h('div');
      root.append(panel('Create a topic', form),
        panel([h('h3', {}, 'Topics'), h('label', { class: 'small' }, showInternal, 'show internal topics')], list));
    },
    async refresh() {
      const topics = await api('GET', '/topics');
      const rows = topics.filter((t) => showInternal.checked || !t.internal).map((t) => h('tr', { 'data-testid': 'topic-row', 'data-name': t.name },
        h('td', {}, h('a', { href: `#/topics/${enc(t.name)}`, 'data-testid': 'topic-link' }, t.name),
          t.internal ? [' ', tag('internal')] : null),
        num(t.partitions, { 'data-testid': 'topic-partitions-count' }),
        num(t.messages, { 'data-testid': 'topic-messages' }),
        h('td', {}, t.amqp_queue ? tag(`queue ${t.amqp_queue.name}`, 'blue') : ''),
        h('td', {}, Object.entries(t.configs || {}).map(([k, v]) => tag(`${k}=${v}`))),
        h('td', { class: 'actions' }, t.internal ? null : h('button', {
          class: 'small danger', 'data-testid': 'topic-delete',
          onclick: (event) => deleteTopic(t.name, event.currentTarget),
        }, 'Delete'))));
      list.replaceChildren(table('topics-table',
        ['Name', { label: 'Partitions', num: true }, { label: 'Messages', num: true }, 'AMQP queue', 'Configs', ''],
        rows, 'No topics yet: create one above, or produce to one.'));
    },
  };
}

async function deleteTopic(name, button) {
  if (!(await confirmAction(`Delete topic "${name}" and all its records? This cannot be undone.`))) return false;
  const done = await act(async () => {
    await api('DELETE', `/topics/${enc(name)}`);
    notice(`Topic "${name}" deleted.`);
    return true;
  }, button);
  return !!done;
}

function topicView(name) {
  let summary;
  let parts;
  return {
    title: `Topic ${name}`,
    mount(root) {
      summary = h('div');
      parts = h('div');
      root.append(
        h('p', {}, h('a', { href: '#/topics', 'data-testid': 'back-to-topics' }, '← all topics')),
        panel([h('h3', {}, 'Topic'), h('button', {
          class: 'small danger', 'data-testid': 'topic-detail-delete',
          onclick: async (event) => { if (await deleteTopic(name, event.currentTarget)) location.hash = '#/topics'; },
        }, 'Delete topic')], summary),
        panel('Partitions', parts));
    },
    async refresh() {
      const t = await api('GET', `/topics/${enc(name)}`);
      summary.replaceChildren(h('dl', { class: 'kv', 'data-testid': 'topic-summary' },
        h('dt', {}, 'Name'), h('dd', { 'data-testid': 'topic-detail-name' }, t.name),
        h('dt', {}, 'Topic id'), h('dd', { class: 'mono' }, t.topic_id),
        h('dt', {}, 'Partitions'), h('dd', {}, String(t.partitions)),
        h('dt', {}, 'Messages'), h('dd', { 'data-testid': 'topic-detail-messages' }, String(t.messages)),
        h('dt', {}, 'AMQP queue'), h('dd', {}, t.amqp_queue ? `${t.amqp_queue.name} (vhost ${t.amqp_queue.vhost})` : '–'),
        h('dt', {}, 'Configs'), h('dd', {}, Object.keys(t.configs || {}).length
          ? Object.entries(t.configs).map(([k, v]) => tag(`${k}=${v}`)) : 'broker defaults')));
      const rows = (t.partition_details || []).map((p) => h('tr', { 'data-testid': 'partition-row', 'data-partition': p.partition },
        num(p.partition), num(p.leader), h('td', {}, (p.replicas || []).join(', ')), h('td', {}, (p.isr || []).join(', ')),
        num(p.log_start_offset, { 'data-testid': 'partition-start' }),
        num(p.last_stable_offset, { 'data-testid': 'partition-lso' }),
        num(p.high_watermark, { 'data-testid': 'partition-hw' }),
        num(p.log_end_offset, { 'data-testid': 'partition-leo' }),
        num(p.error ? null : p.high_watermark - p.log_start_offset),
        num(p.error ? null : formatBytes(p.size_bytes)), num(p.segments)));
      parts.replaceChildren(table('partitions-table', [{ label: 'Partition', num: true }, { label: 'Leader', num: true },
        'Replicas', 'ISR', { label: 'Log start', num: true }, { label: 'LSO', num: true },
        { label: 'High watermark', num: true }, { label: 'Log end', num: true }, { label: 'Messages', num: true },
        { label: 'Size', num: true }, { label: 'Segments', num: true }], rows));
    },
  };
}

let vhostCache = ['/'];
async function loadVhosts() {
  try { vhostCache = (await api('GET', '/vhosts')).map((v) => v.name); } catch { /* keep the last list */ }
  return vhostCache;
}

function vhostSelect(testid, selected = '/') {
  const select = h('select', { name: 'vhost', 'data-testid': testid });
  const fill = (names) => select.replaceChildren(...names.map((n) => h('option', { value: n, selected: n === selected }, n)));
  fill(vhostCache);
  loadVhosts().then(fill);
  return select;
}

function featureTags(obj) {
  const out = [];
  if (obj.durable) out.push(tag('D', 'blue'));
  if (obj.auto_delete) out.push(tag('AD'));
  if (obj.exclusive) out.push(tag('Excl'));
  if (obj.internal) out.push(tag('I'));
  for (const [k, v] of Object.entries(obj.arguments || {})) {
    if (k !== 'x-queue-type') out.push(tag(`${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`));
  }
  return out;
}

function queuesView() {
  let list;
  return {
    title: 'Queues',
    mount(root) {
      const form = h('form', { 'data-testid': 'queue-create-form' },
        h('div', { class: 'form-row' },
          h('label', { class: 'narrow' }, 'Vhost', vhostSelect('queue-vhost')),
          h('label', {}, 'Name', h('input', { name: 'name', required: true, 'data-testid': 'queue-name', placeholder: 'tasks' })),
          h('label', { class: 'narrow' }, 'Type', h('select', { name: 'type', 'data-testid': 'queue-type' },
            h('option', { value: 'classic' }, 'classic'), h('option', { value: 'quorum' }, 'quorum'),
            h('option', { value: 'stream' }, 'stream'))),
          h('label', { class: 'wide' }, 'Arguments (key=value, optional)',
            h('input', { name: 'arguments', 'data-testid': 'queue-arguments', placeholder: 'x-message-ttl=60000, x-max-length=1000' })),
          h('label', {}, h('input', { type: 'checkbox', name: 'durable', checked: true, 'data-testid': 'queue-durable' }), 'durable'),
          h('label', {}, h('input', { type: 'checkbox', name: 'auto_delete', 'data-testid': 'queue-auto-delete' }), 'auto-delete'),
          h('button', { type: 'submit', class: 'primary', 'data-testid': 'queue-create' }, 'Create queue')));
      form.addEventListener('submit', (event) => {
        event.preventDefault();
        const data = new FormData(form);
        const name = data.get('name').trim();
        const vhost = data.get('vhost');
        act(async () => {
          const args = parsePairs(data.get('arguments'), true);
          if (data.get('type') !== 'classic') args['x-queue-type'] = data.get('type');
          await api('PUT', `/queues/${enc(vhost)}/${enc(name)}`, {
            durable: data.get('durable') === 'on', auto_delete: data.get('auto_delete') === 'on', arguments: args,
          });
          notice(`Queue "${name}" declared in vhost ${vhost}.`);
          form.querySelector('[name=name]').value = '';
          await refreshNow();
        }, event.submitter);
      });
      list = h('div');
      root.append(panel('Declare a queue', form), panel('Queues', list));
    },
    async refresh() {
      const queues = await api('GET', '/queues');
      const rows = queues.map((q) => {
        const path = `/queues/${enc(q.vhost)}/${enc(q.name)}`;
        return h('tr', { 'data-testid': 'queue-row', 'data-name': q.name, 'data-vhost': q.vhost },
          h('td', {}, q.vhost),
          h('td', { 'data-testid': 'queue-row-name' }, q.name),
          h('td', {}, tag(q.type, q.type === 'stream' ? 'green' : '')),
          h('td', {}, featureTags(q)),
          num(q.messages_ready, { 'data-testid': 'queue-ready' }),
          num(q.messages_unacknowledged, { 'data-testid': 'queue-unacked' }),
          num(q.messages, { 'data-testid': 'queue-total' }),
          num(q.consumers, { 'data-testid': 'queue-consumers' }),
          num((q.message_stats || {}).publish ?? 0),
          h('td', { class: 'actions' },
            h('button', {
              class: 'small', 'data-testid': 'queue-publish',
              onclick: () => { location.hash = `#/publish?vhost=${enc(q.vhost)}&queue=${enc(q.name)}`; },
            }, 'Publish'),
            h('button', {
              class: 'small', 'data-testid': 'queue-purge', onclick: async (event) => {
                const button = event.currentTarget;
                if (!(await confirmAction(`Purge all ready messages from queue "${q.name}"?`))) return;
                await act(async () => {
                  await api('DELETE', `${path}/contents`);
                  notice(`Queue "${q.name}" purged.`);
                  await refreshNow();
                }, button);
              },
            }, 'Purge'),
            h('button', {
              class: 'small danger', 'data-testid': 'queue-delete', onclick: async (event) => {
                const button = event.currentTarget;
                if (!(await confirmAction(`Delete queue "${q.name}" and its messages?`))) return;
                await act(async () => {
                  await api('DELETE', path);
                  notice(`Queue "${q.name}" deleted.`);
                  await refreshNow();
                }, button);
              },
            }, 'Delete')));
      });
      list.replaceChildren(table('queues-table', ['Vhost', 'Name', 'Type', 'Features', { label: 'Ready', num: true },
        { label: 'Unacked', num: true }, { label: 'Total', num: true }, { label: 'Consumers', num: true },
        { label: 'Published', num: true }, ''], rows, 'No queues yet.'));
    },
  };
}

function exchangesView() {
  let exchanges;
  let bindings;
  return {
    title: 'Exchanges & bindings',
    mount(root) {
      const form = h('form', { 'data-testid': 'exchange-create-form' },
        h('div', { class: 'form-row' },
          h('label', { class: 'narrow' }, 'Vhost', vhostSelect('exchange-vhost')),
          h('label', {}, 'Name', h('input', { name: 'name', required: true, 'data-testid': 'exchange-name', placeholder: 'events' })),
          h('label', { class: 'narrow' }, 'Type', h('select', { name: 'type', 'data-testid': 'exchange-type' },
            ['direct', 'fanout', 'topic', 'headers'].map((t) => h('option', { value: t }, t)))),
          h('label', {}, h('input', { type: 'checkbox', name: 'durable', checked: true }), 'durable'),
          h('button', { type: 'submit', class: 'primary', 'data-testid': 'exchange-create' }, 'Declare exchange')));
      form.addEventListener('submit', (event) => {
        event.preventDefault();
        const data = new FormData(form);
        const name = data.get('name').trim();
        act(async () => {
          await api('PUT', `/exchanges/${enc(data.get('vhost'))}/${enc(name)}`, { type: data.get('type'), durable: data.get('durable') === 'on' });
          notice(`Exchange "${name}" declared.`);
          form.querySelector('[name=name]').value = '';
          await refreshNow();
        }, event.submitter);
      });
      exchanges = h('div');
      bindings = h('div');
      root.append(panel('Exchanges', exchanges), panel('Bindings', bindings), panel('Declare an exchange', form));
    },
    async refresh() {
      const [xs, bs] = await Promise.all([api('GET', '/exchanges'), api('GET', '/bindings')]);
      const out = {};
      for (const b of bs) out[`${b.vhost}\u0000${b.source}`] = (out[`${b.vhost}\u0000${b.source}`] || 0) + 1;
      exchanges.replaceChildren(table('exchanges-table', ['Vhost', 'Name', 'Type', 'Features', { label: 'Bindings', num: true }, ''],
        xs.map((x) => h('tr', { 'data-testid': 'exchange-row', 'data-name': x.name },
          h('td', {}, x.vhost), h('td', {}, defaultName(x.name)), h('td', {}, x.type), h('td', {}, featureTags(x)),
          num(out[`${x.vhost}\u0000${x.name}`] || 0),
          h('td', { class: 'actions' }, x.name === '' || x.name.startsWith('amq.') ? null : h('button', {
            class: 'small danger', 'data-testid': 'exchange-delete', onclick: async (event) => {
              const button = event.currentTarget;
              if (!(await confirmAction(`Delete exchange "${x.name}" and its bindings?`))) return;
              await act(async () => {
                await api('DELETE', `/exchanges/${enc(x.vhost)}/${enc(x.name)}`);
                notice(`Exchange "${x.name}" deleted.`);
                await refreshNow();
              }, button);
            },
          }, 'Delete'))))));
      bindings.replaceChildren(table('bindings-table', ['Vhost', 'Source', 'Destination', 'Routing key', 'Arguments'],
        bs.map((b) => h('tr', { 'data-testid': 'binding-row', 'data-source': b.source, 'data-destination': b.destination },
          h('td', {}, b.vhost), h('td', {}, defaultName(b.source)),
          h('td', {}, tag(b.destination_type, b.destination_type === 'queue' ? 'blue' : ''), ' ', b.destination),
          h('td', { class: 'mono' }, b.routing_key),
          h('td', {}, Object.entries(b.arguments || {}).map(([k, v]) => tag(`${k}=${v}`))))), 'No bindings.'));
    },
  };
}

function groupsView() {
  let list;
  return {
    title: 'Consumer groups',
    mount(root) {
      list = h('div');
      root.append(list);
    },
    async refresh() {
      const groups = await api('GET', '/groups');
      if (!groups.length) {
        list.replaceChildren(panel('Consumer groups', h('p', { class: 'empty' }, 'No consumer groups yet: a Kafka consumer with a group.id makes one.')));
        return;
      }
      const summary = table('groups-table', ['Group', 'State', 'Protocol', { label: 'Members', num: true },
        { label: 'Partitions', num: true }, { label: 'Total lag', num: true }],
      groups.map((g) => h('tr', { 'data-testid': 'group-row', 'data-name': g.group_id },
        h('td', {}, g.group_id), h('td', {}, tag(g.state || 'Empty', g.state === 'Stable' ? 'green' : '')),
        h('td', {}, [g.protocol_type, g.protocol].filter(Boolean).join(' / ') || '–'),
        num(g.members.length), num(g.offsets.length),
        num(g.lag, { 'data-testid': 'group-total-lag', class: g.lag > 0 ? 'num lag-bad' : 'num' }))));
      const details = groups.map((g) => panel(
        [h('h3', {}, `Group ${g.group_id}`), h('span', { class: 'muted small' }, `lag ${g.lag}`)],
        table('group-offsets', ['Topic', { label: 'Partition', num: true }, { label: 'Committed offset', num: true },
          { label: 'Log end offset', num: true }, { label: 'Lag', num: true }],
        g.offsets.map((o) => h('tr', { 'data-testid': 'group-offset-row', 'data-topic': o.topic, 'data-partition': o.partition },
          h('td', {}, o.topic), num(o.partition), num(o.committed_offset, { 'data-testid': 'group-committed' }),
          num(o.log_end_offset), num(o.lag, { 'data-testid': 'group-lag', class: o.lag > 0 ? 'num lag-bad' : 'num' }))),
        'No committed offsets.'),
        g.members.length ? h('details', {}, h('summary', {}, `${g.members.length} member${g.members.length === 1 ? '' : 's'}`),
          table('group-members', ['Member id', 'Client id', 'Host'], g.members.map((m) => h('tr', {},
            h('td', { class: 'mono' }, m.member_id), h('td', {}, m.client_id), h('td', {}, m.client_host))))) : null,
      ));
      // keep the open/closed state of the members' lists across refreshes
      const open = new Set([...list.querySelectorAll('details[open]')].map((d) => d.closest('[data-group]')?.dataset.group));
      details.forEach((d, i) => {
        d.dataset.group = groups[i].group_id;
        d.dataset.testid = 'group';
        const det = d.querySelector('details');
        if (det && open.has(groups[i].group_id)) det.open = true;
      });
      list.replaceChildren(panel('Consumer groups', summary), ...details);
    },
  };
}

function connectionsView() {
  let conns;
  let chans;
  return {
    title: 'Connections & channels',
    mount(root) {
      conns = h('div');
      chans = h('div');
      root.append(panel('Connections', conns), panel('AMQP channels', chans));
    },
    async refresh() {
      const [cs, chs] = await Promise.all([api('GET', '/connections'), api('GET', '/channels')]);
      conns.replaceChildren(table('connections-table', ['Name', 'Protocol', 'User', 'Vhost', { label: 'Channels', num: true }, 'State', 'Client'],
        cs.map((c) => {
          const props = c.client_properties || {};
          return h('tr', { 'data-testid': 'connection-row', 'data-protocol': c.protocol },
            h('td', { class: 'mono' }, c.name), h('td', {}, tag(c.protocol, c.protocol === 'Kafka' ? 'blue' : 'green')),
            h('td', {}, c.user || '–'), h('td', {}, c.vhost || '–'), num(c.channels),
            h('td', {}, tag(c.state, c.state === 'running' ? '' : 'red')),
            h('td', {}, [props.product, props.version].filter(Boolean).join(' ') || '–'));
        }), 'No client is connected.'));
      chans.replaceChildren(table('channels-table', ['Channel', 'User', 'Vhost', 'Mode', { label: 'Prefetch', num: true },
        { label: 'Consumers', num: true }, { label: 'Unacked', num: true }, 'State'],
      chs.map((c) => h('tr', { 'data-testid': 'channel-row' },
        h('td', { class: 'mono' }, c.name), h('td', {}, c.user), h('td', {}, c.vhost || '–'),
        h('td', {}, c.confirm ? tag('confirm') : null, c.transactional ? tag('tx') : null),
        num(c.prefetch_count), num(c.consumer_count), num(c.messages_unacknowledged), h('td', {}, c.state))),
      'No AMQP channels are open.'));
    },
  };
}

function publishView(params) {
  const initialVhost = params.get('vhost') || '/';
  let exchangeSelect;
  let vhost;
  let result;
  const fillExchanges = async () => {
    const xs = await api('GET', `/exchanges/${enc(vhost.value)}`);
    const current = exchangeSelect.value || 'amq.default';
    const names = ['amq.default', ...xs.map((x) => x.name).filter((n) => n !== '' && n !== 'amq.default')];
    exchangeSelect.replaceChildren(...names.map((n) => h('option', { value: n, selected: n === current },
      n === 'amq.default' ? '(AMQP default)' : n)));
  };
  return {
    title: 'Publish message',
    mount(root) {
      vhost = vhostSelect('publish-vhost', initialVhost);
      exchangeSelect = h('select', { name: 'exchange', 'data-testid': 'publish-exchange' },
        h('option', { value: 'amq.default' }, '(AMQP default)'));
      vhost.addEventListener('change', () => act(fillExchanges));
      const field = (label, name, attrs = {}) => h('label', {}, label, h('input', { name, 'data-testid': `publish-${name.replace(/_/g, '-')}`, ...attrs }));
      const form = h('form', { 'data-testid': 'publish-form' },
        h('div', { class: 'form-grid' },
          h('label', {}, 'Vhost', vhost),
          h('label', {}, 'Exchange', exchangeSelect),
          field('Routing key', 'routing_key', { value: params.get('queue') || '' }),
          h('label', {}, 'Delivery mode', h('select', { name: 'delivery_mode', 'data-testid': 'publish-delivery-mode' },
            h('option', { value: '2' }, '2 – persistent'), h('option', { value: '1' }, '1 – non-persistent'))),
          h('label', { class: 'wide' }, 'Payload', h('textarea', { name: 'payload', rows: '5', 'data-testid': 'publish-payload' })),
          h('label', {}, 'Payload encoding', h('select', { name: 'payload_encoding', 'data-testid': 'publish-encoding' },
            h('option', { value: 'string' }, 'string (UTF-8)'), h('option', { value: 'base64' }, 'base64'))),
          field('Content type', 'content_type', { placeholder: 'text/plain' }),
          field('Message id', 'message_id'),
          field('Correlation id', 'correlation_id'),
          field('Reply to', 'reply_to'),
          field('Expiration (ms)', 'expiration', { placeholder: '60000' }),
          field('Priority', 'priority', { type: 'number', min: '0', max: '255' }),
          h('label', { class: 'wide' }, 'Headers (key=value per line, or a JSON object)',
            h('textarea', { name: 'headers', rows: '2', 'data-testid': 'publish-headers' }))),
        h('div', { class: 'form-actions' },
          h('button', { type: 'submit', class: 'primary', 'data-testid': 'publish-submit' }, 'Publish message'),
          result = h('span', { 'data-testid': 'publish-result', role: 'status' })));
      form.addEventListener('submit', (event) => {
        event.preventDefault();
        const data = new FormData(form);
        result.textContent = '';
        act(async () => {
          const properties = { delivery_mode: Number(data.get('delivery_mode')) };
          for (const key of ['content_type', 'message_id', 'correlation_id', 'reply_to', 'expiration']) {
            if (data.get(key).trim()) properties[key] = data.get(key).trim();
          }
          if (data.get('priority') !== '') properties.priority = Number(data.get('priority'));
          const headers = parsePairs(data.get('headers'), true);
          if (Object.keys(headers).length) properties.headers = headers;
          const exchange = data.get('exchange');
          const answer = await api('POST', `/exchanges/${enc(data.get('vhost'))}/${enc(exchange)}/publish`, {
            routing_key: data.get('routing_key'), payload: data.get('payload'),
            payload_encoding: data.get('payload_encoding'), properties,
          });
          result.className = answer.routed ? 'result-ok' : 'result-warn';
          result.textContent = answer.routed
            ? `Message published and routed (${clockTime()}).`
            : `Message published, but not routed: no queue is bound for routing key "${data.get('routing_key')}" (${clockTime()}).`;
          result.dataset.routed = String(!!answer.routed);
        }, event.submitter);
      });
      root.append(panel('Publish a test message', h('p', { class: 'muted intro' },
        'Published through the broker like an AMQP basic.publish; the default exchange routes by queue name.'), form));
    },
    async refresh() {
      if (exchangeSelect.options.length <= 1) await fillExchanges();
    },
  };
}

const VIEWS = {
  overview: overviewView, topics: topicsView, queues: queuesView, exchanges: exchangesView,
  groups: groupsView, connections: connectionsView, publish: publishView,
};

// --- routing and refresh --------------------------------------------------------------------
let current = null;
let generation = 0;
let refreshing = null;

function route() {
  const hash = location.hash.replace(/^#\/?/, '') || 'overview';
  const [path, query = ''] = hash.split('?');
  const [name, ...rest] = path.split('/');
  const params = new URLSearchParams(query);
  let view;
  let nav = name;
  if (name === 'topics' && rest.length && rest[0]) view = topicView(decodeURIComponent(rest.join('/')));
  else if (VIEWS[name]) view = VIEWS[name](params);
  else { view = overviewView(); nav = 'overview'; }
  for (const a of document.querySelectorAll('.sidebar a')) a.classList.toggle('active', a.dataset.view === nav);
  generation += 1;
  current = view;
  clearError();
  clearNotice(false);
  $('[data-testid=view-title]').textContent = view.title;
  const root = $('#view');
  root.replaceChildren();
  root.dataset.view = nav;
  root.dataset.loaded = 'false';
  view.mount(root);
  refreshNow();
}

async function refreshNow() {
  if (!current || !auth) return;
  const gen = generation;
  const view = current;
  if (refreshing) await refreshing.catch(() => {});
  refreshing = (async () => {
    try {
      await view.refresh();
      if (gen !== generation) return;
      clearError(true);
      $('[data-testid=last-refresh]').textContent = `updated ${clockTime()}`;
      $('.dot').classList.remove('stale');
      $('#view').dataset.loaded = 'true';
    } catch (exc) {
      if (gen !== generation || !auth) return;
      $('.dot').classList.add('stale');
      showError(exc, true);
    }
  })();
  return refreshing;
}

setInterval(() => {
  if (auth && !document.hidden && $('[data-testid=auto-refresh]').checked) refreshNow();
}, REFRESH_MS);

let resizeTimer = null;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => { if (current && $('#view').dataset.view === 'overview') refreshNow(); }, 200);
});
window.addEventListener('hashchange', () => { if (auth) route(); });

// --- logging in and out ---------------------------------------------------------------------
function showLogin(message = '') {
  $('#app').hidden = true;
  clearError();
  clearNotice();
  $('#login').hidden = false;
  const error = $('[data-testid=login-error]');
  error.textContent = message;
  error.hidden = !message;
  const user = $('[data-testid=login-user]');  // left empty, as RabbitMQ's login: no credentials on the page
  user.focus();
}

function showApp(who) {
  $('#login').hidden = true;
  $('#app').hidden = false;
  $('[data-testid=whoami]').textContent = `${who.name} · ${(who.tags || []).join(', ') || 'no tags'}`;
  route();
}

function sessionExpired(exc) {
  auth = null;
  current = null;
  sessionStorage.removeItem(AUTH_KEY);
  showLogin(`Signed out: ${exc.message}`);
}

$('#login-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const user = $('[data-testid=login-user]').value.trim();
  const token = basicToken(user, $('[data-testid=login-password]').value);
  const button = $('[data-testid=login-submit]');
  button.disabled = true;
  try {
    const who = await api('GET', '/whoami', undefined, token);
    auth = { user, token };
    sessionStorage.setItem(AUTH_KEY, JSON.stringify(auth));
    $('[data-testid=login-password]').value = '';
    showApp(who);
  } catch (exc) {
    const hint = exc.status === 401 ? ' (check the user name and password; guest works from localhost only)' : '';
    showLogin(`${exc.message}${hint}`);
  } finally {
    button.disabled = false;
  }
});

$('[data-testid=logout]').addEventListener('click', () => {
  auth = null;
  current = null;
  sessionStorage.removeItem(AUTH_KEY);
  $('[data-testid=login-user]').value = '';
  showLogin();
});

$('[data-testid=error-dismiss]').addEventListener('click', () => clearError());

(async () => {
  if (!auth) { showLogin(); return; }
  try {
    showApp(await api('GET', '/whoami'));
  } catch (exc) {
    if (auth) showLogin(exc.message);
  }
})();
