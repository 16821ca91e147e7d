/* The dashboards' shared script (router.html and serve.html include it:
 * embed.cmake): number formats, a rolling window of samples and a
 * hand-written canvas line chart (no library: the page loads nothing). */
'use strict';

const PALETTE = ['#58a6ff', '#f0883e', '#3fb950', '#d2a8ff', '#ff7b72', '#39c5cf', '#e3b341', '#f778ba',
                 '#7ee787', '#a5d6ff', '#ffa657', '#bc8cff'];
const POLL_MS = 1000;
const WINDOW_S = 180;             /* the charts' rolling window */

function $(id) { return document.getElementById(id); }

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/* 1234 -> "1,234"; 123456 -> "123k"; 1.5e6 -> "1.5M" */
function fmtNum(v, digits) {
  if (v === null || v === undefined || !isFinite(v)) return '\u2013';
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + 'G';
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + 'M';
  if (a >= 1e5) return (v / 1e3).toFixed(0) + 'k';
  if (digits === undefined) digits = a >= 100 || Number.isInteger(v) ? 0 : a >= 10 ? 1 : 2;
  return v.toLocaleString('en-US', {minimumFractionDigits: digits, maximumFractionDigits: digits});
}

/* seconds as "850 ms", "4.2 s", "12 s" */
function fmtMs(s) {
  if (s === null || s === undefined || !isFinite(s)) return '\u2013';
  if (s === 0) return '0';
  if (s >= 1) return (s >= 10 ? s.toFixed(0) : s.toFixed(1).replace(/\.0$/, '')) + ' s';
  return (s < 0.01 ? (s * 1000).toFixed(1) : (s * 1000).toFixed(0)) + ' ms';
}

function fmtDur(s) {
  s = Math.floor(s);
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor(s % 3600 / 60) + 'm';
  return Math.floor(s / 86400) + 'd ' + Math.floor(s % 86400 / 3600) + 'h';
}

function fmtBytes(b) {
  if (!b) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) b /= 1024, i++;
  return b.toFixed(b >= 10 || i === 0 ? 0 : 1) + ' ' + u[i];
}

/* Keep a series' points ([t, v], t in the server's seconds) inside the window. */
function pushPoint(pts, t, v) {
  pts.push([t, v]);
  while (pts.length && pts[0][0] < t - WINDOW_S - 5) pts.shift();
}

/* The rate of a cumulative counter over about the last `span` seconds of
 * samples ([t, value] oldest first), or null before two samples. */
function rateOver(hist, span) {
  if (hist.length < 2) return null;
  const last = hist[hist.length - 1];
  let i = hist.length - 2;
  while (i > 0 && last[0] - hist[i][0] < span) i--;
  const dt = last[0] - hist[i][0];
  return dt > 0 ? (last[1] - hist[i][1]) / dt : null;
}

/* 1, 2, 5 times a power of ten, at least x. */
function niceStep(x) {
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  const m = x / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* Draw o.series ({label, color, pts, dash}) on canvas c between times t0
 * and t1 (seconds); o.yMin: the least top of the y axis; o.fmt: a tick's
 * label. The mouse shows every series' value at a time. */
function drawChart(c, o) {
  c._o = o;
  if (!c._hooked) {
    c._hooked = true;
    c.addEventListener('mousemove', e => { c._hx = e.offsetX; drawChart(c, c._o); });
    c.addEventListener('mouseleave', () => { c._hx = null; drawChart(c, c._o); });
  }
  const dpr = window.devicePixelRatio || 1, W = c.clientWidth, H = c.clientHeight;
  if (c.width !== Math.round(W * dpr) || c.height !== Math.round(H * dpr)) {
    c.width = Math.round(W * dpr);
    c.height = Math.round(H * dpr);
  }
  const g = c.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, W, H);
  g.font = '11px system-ui, "DejaVu Sans", sans-serif';
  let ymax = 0;
  for (const s of o.series)
    for (const p of s.pts) if (p[0] >= o.t0 && p[1] !== null && p[1] > ymax) ymax = p[1];
  const step = niceStep(Math.max(ymax * 1.15, o.yMin || 1) / 4);
  const ytop = step * Math.max(Math.ceil(ymax * 1.05 / step), Math.ceil((o.yMin || 1) / step));
  const ticks = [];
  for (let v = 0; v <= ytop + step / 2; v += step) ticks.push([v, o.fmt ? o.fmt(v) : fmtNum(v)]);
  /* the plot starts right of the widest y label */
  const L = Math.ceil(Math.max(...ticks.map(k => g.measureText(k[1]).width))) + 12, R = 6, T = 6, B = 20;
  const pw = W - L - R, ph = H - T - B;
  const X = t => L + (t - o.t0) / (o.t1 - o.t0) * pw, Y = v => T + ph - v / ytop * ph;
  /* grid and y labels */
  g.strokeStyle = '#212a37';
  g.fillStyle = '#6e7b8b';
  g.lineWidth = 1;
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (const [v, label] of ticks) {
    const y = Math.round(Y(v)) + 0.5;
    g.beginPath(); g.moveTo(L, y); g.lineTo(W - R, y); g.stroke();
    g.fillText(label, L - 6, y);
  }
  /* x labels: seconds (or minutes) before now */
  g.textAlign = 'center';
  g.textBaseline = 'alphabetic';
  const span = o.t1 - o.t0, xs = span > 120 ? 60 : span > 50 ? 15 : span > 20 ? 10 : 5;
  for (let a = 0; a <= span + 0.01; a += xs) {
    const x = X(o.t1 - a);
    if (x < L + 12 && a > 0) break;
    g.textAlign = a === 0 ? 'right' : 'center';
    g.fillText(a === 0 ? 'now' : a % 60 === 0 ? '-' + a / 60 + 'm' : '-' + a + 's', a === 0 ? W - R : x, H - 5);
  }
  /* the lines: a null value breaks one; a lone point is a dot */
  g.save();
  g.beginPath(); g.rect(L, T - 2, pw + 2, ph + 4); g.clip();
  for (const s of o.series) {
    g.strokeStyle = g.fillStyle = s.color;
    g.lineWidth = s.dash ? 1.5 : 2;
    g.lineJoin = 'round';
    g.setLineDash(s.dash ? [5, 4] : []);
    let run = [];
    const flush = () => {
      if (run.length === 1) { g.beginPath(); g.arc(run[0][0], run[0][1], 2.5, 0, 7); g.fill(); }
      else if (run.length > 1) {
        g.beginPath();
        run.forEach((p, i) => i ? g.lineTo(p[0], p[1]) : g.moveTo(p[0], p[1]));
        g.stroke();
        if (!s.dash) {  /* a faint area under it */
          g.globalAlpha = 0.08;
          g.lineTo(run[run.length - 1][0], Y(0)); g.lineTo(run[0][0], Y(0)); g.closePath(); g.fill();
          g.globalAlpha = 1;
        }
      }
      run = [];
    };
    for (const p of s.pts) {
      if (p[0] < o.t0 - 5) continue;
      if (p[1] === null) flush(); else run.push([X(p[0]), Y(p[1])]);
    }
    flush();
  }
  g.restore();
  g.setLineDash([]);
  if (!o.series.some(s => s.pts.some(p => p[1] !== null))) {
    g.fillStyle = '#5d6b7d'; g.textAlign = 'center';
    g.fillText('waiting for data\u2026', L + pw / 2, T + ph / 2);
  }
  if (c._hx != null && c._hx >= L && c._hx <= W - R)
    hover(g, o, c._hx, o.t0 + (c._hx - L) / pw * (o.t1 - o.t0), T, ph, W);
}

/* The crosshair at x (time t) and every series' nearest value. */
function hover(g, o, hx, t, T, ph, W) {
  const rows = [];
  for (const s of o.series) {
    let best = null;
    for (const p of s.pts) if (best === null || Math.abs(p[0] - t) < Math.abs(best[0] - t)) best = p;
    if (best && Math.abs(best[0] - t) < 3) rows.push([s.color, s.label, best[1]]);
  }
  g.strokeStyle = '#8b98a8'; g.lineWidth = 1;
  g.beginPath(); g.moveTo(hx + 0.5, T); g.lineTo(hx + 0.5, T + ph); g.stroke();
  if (!rows.length) return;
  const bw = 190, bh = 8 + rows.length * 16, bx = hx + bw + 12 > W ? hx - bw - 8 : hx + 8;
  g.fillStyle = 'rgba(13,17,23,.92)'; g.strokeStyle = '#263041';
  g.fillRect(bx, T + 4, bw, bh); g.strokeRect(bx + 0.5, T + 4.5, bw, bh);
  g.textBaseline = 'middle';
  rows.forEach((r, i) => {
    const y = T + 12 + i * 16 + 4;
    g.fillStyle = r[0]; g.fillRect(bx + 8, y - 4, 8, 8);
    g.fillStyle = '#e6edf3'; g.textAlign = 'left'; g.fillText(r[1].slice(0, 22), bx + 22, y);
    g.textAlign = 'right'; g.fillText(r[2] === null ? '\u2013' : o.fmt ? o.fmt(r[2]) : fmtNum(r[2]), bx + bw - 8, y);
  });
}

/* The charts' time span: it grows with the page's age up to the window. */
function chartSpan(first, now) {
  return Math.min(WINDOW_S, Math.max(30, Math.ceil((now - first) / 10) * 10));
}
