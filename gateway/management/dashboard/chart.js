// Hand-written SVG line charts over a time window: no library, nothing fetched.
const NS = 'http://www.w3.org/2000/svg';
const HEIGHT = 190;
const PAD = { left: 58, right: 14, top: 12, bottom: 24 };

export const COLORS = ['#1f6feb', '#1a7f37', '#d97706', '#9333ea', '#dc2626', '#0891b2'];

function svg(name, attrs = {}, parent = null) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function niceStep(raw) {
  if (!(raw > 0)) return 1;
  const exp = 10 ** Math.floor(Math.log10(raw));
  const f = raw / exp;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * exp;
}

export function formatNumber(n, digits = 1) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  const abs = Math.abs(n);
  const units = [[1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
  for (const [size, suffix] of units) {
    if (abs >= size) return `${+(n / size).toFixed(digits)}${suffix}`;
  }
  return `${+n.toFixed(abs < 10 && !Number.isInteger(n) ? 2 : digits)}`;
}

export function formatBytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${+n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function clock(t) {
  const d = new Date(t * 1000);
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

/**
 * Draws (or redraws) a chart into ``el``.
 * series: [{key, label, values: [[time_s, value], ...]}]; from/to: the window in epoch seconds;
 * format: value -> text; integer: the values are counts (ticks at whole numbers).
 */
export function lineChart(el, { series, from, to, format = formatNumber, integer = false, testid = '' }) {
  const width = Math.max(el.clientWidth || 0, 320);
  const plotW = width - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  let max = 0;
  for (const s of series) for (const [, v] of s.values) if (v > max) max = v;
  let step = niceStep(max / 4);
  if (integer) step = Math.max(1, Math.ceil(step));
  const top = Math.max(step, Math.ceil(max / step) * step);
  const x = (t) => PAD.left + ((t - from) / (to - from)) * plotW;
  const y = (v) => PAD.top + plotH - (v / top) * plotH;

  const root = svg('svg', {
    class: 'chart', viewBox: `0 0 ${width} ${HEIGHT}`, width, height: HEIGHT, role: 'img',
    'data-points': String(Math.max(0, ...series.map((s) => s.values.length))),
  });
  if (testid) root.setAttribute('data-testid', testid);
  const title = svg('title', {}, root);
  title.textContent = series.map((s) => s.label).join(', ');

  for (let v = 0; v <= top + step / 2; v += step) {
    const yy = y(v);
    svg('line', { class: v === 0 ? 'axis' : 'grid', x1: PAD.left, x2: width - PAD.right, y1: yy, y2: yy }, root);
    const label = svg('text', { x: PAD.left - 8, y: yy + 4, 'text-anchor': 'end' }, root);
    label.textContent = format(v);
  }
  const span = to - from;
  const tickEvery = span > 900 ? 300 : span > 300 ? 120 : 60;
  for (let t = Math.ceil(from / tickEvery) * tickEvery; t <= to; t += tickEvery) {
    const xx = x(t);
    svg('line', { class: 'grid', x1: xx, x2: xx, y1: PAD.top, y2: PAD.top + plotH }, root);
    const label = svg('text', { x: xx, y: HEIGHT - 6, 'text-anchor': 'middle' }, root);
    label.textContent = clock(t);
  }

  series.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    const pts = s.values.filter(([t]) => t >= from - 10 && t <= to + 10);
    if (pts.length === 0) return;
    const line = pts.map(([t, v], j) => `${j ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
    if (pts.length > 1) {
      const base = y(0).toFixed(1);
      svg('path', {
        class: 'area', fill: color,
        d: `${line} L${x(pts[pts.length - 1][0]).toFixed(1)},${base} L${x(pts[0][0]).toFixed(1)},${base} Z`,
      }, root);
    }
    svg('path', { class: 'series', stroke: color, d: line, 'data-series': s.key }, root);
    if (pts.length === 1) {
      svg('circle', { cx: x(pts[0][0]), cy: y(pts[0][1]), r: 3, fill: color, 'data-series': s.key }, root);
    }
  });

  // legend: the latest values, or the values under the pointer
  const legend = document.createElement('div');
  legend.className = 'legend';
  const cells = series.map((s, i) => {
    const item = document.createElement('span');
    item.dataset.series = s.key;
    const swatch = document.createElement('span');
    swatch.className = 'swatch';
    swatch.style.background = s.color || COLORS[i % COLORS.length];
    const val = document.createElement('span');
    val.className = 'val';
    item.append(swatch, s.label, val);
    legend.appendChild(item);
    return val;
  });
  const showAt = (index) => {
    series.forEach((s, i) => {
      const point = index === null ? s.values[s.values.length - 1] : s.values[index];
      cells[i].textContent = point ? format(point[1]) : '–';
    });
  };
  showAt(null);

  const cursor = svg('line', { class: 'cursor', y1: PAD.top, y2: PAD.top + plotH, visibility: 'hidden' }, root);
  const times = (series[0] && series[0].values.map(([t]) => t)) || [];
  root.addEventListener('mousemove', (event) => {
    if (!times.length) return;
    const box = root.getBoundingClientRect();
    const t = from + ((event.clientX - box.left) * (width / box.width) - PAD.left) / plotW * (to - from);
    let best = 0;
    times.forEach((tt, i) => { if (Math.abs(tt - t) < Math.abs(times[best] - t)) best = i; });
    cursor.setAttribute('x1', x(times[best]));
    cursor.setAttribute('x2', x(times[best]));
    cursor.setAttribute('visibility', 'visible');
    showAt(best);
  });
  root.addEventListener('mouseleave', () => { cursor.setAttribute('visibility', 'hidden'); showAt(null); });

  el.replaceChildren(root, legend);
}
