/* gpumemtrace report: draws the interactive sections of the page (timeline,
 * flame graph, tables, address map) from the JSON block #gmt-data that
 * tools/python/gpumemtrace/view/html.py embeds. Every name from a snapshot goes into the page
 * as text (textContent, createTextNode), never as markup. Colours come from
 * report.css (canvas colours from its custom properties). */
(function () {
  'use strict';

  var errorBox = document.getElementById('gmt-error');
  window.addEventListener('error', function (e) {
    // Say so in the page too; the error still reaches the console.
    if (errorBox) {
      errorBox.hidden = false;
      errorBox.textContent = 'The report\u2019s script failed: ' + (e.message || 'unknown error') +
        ' \u2014 some sections may be missing.';
    }
  });

  var started = performance.now();
  var DATA = JSON.parse(document.getElementById('gmt-data').textContent);
  var KINDS = DATA.kinds;
  var KNOWN_KINDS = ['device', 'async', 'managed', 'host', 'registered', 'vmm', 'array'];
  var FR = DATA.frames;
  var docs = DATA.docs;

  // --- Text and numbers ---------------------------------------------------------

  // Controls and bidirectional overrides shown as \uXXXX, as html.py's clean().
  var UNSAFE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
  function clean(s) {
    if (s === null || s === undefined) return '';
    return String(s).replace(UNSAFE, function (c) {
      return '\\u' + ('0000' + c.charCodeAt(0).toString(16)).slice(-4);
    });
  }

  // Python's f"{x:.{d}f}": ties to even, where toFixed rounds them up.
  function fixed(x, d) {
    var p = Math.pow(10, d), s = x * p;
    if (Number.isInteger(s * 2) && !Number.isInteger(s)) {
      var n = Math.floor(s);
      if (n % 2) n += 1;
      return (n / p).toFixed(d);
    }
    return x.toFixed(d);
  }

  var UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  // As model.fmt_bytes: "0 B", "512 B", "4.00 MiB", "32.0 MiB", "640 MiB".
  function fmtBytes(n) {
    if (n === null || n === undefined || Number.isNaN(n)) return '?';
    var sign = n < 0 ? '-' : '';
    n = Math.abs(n);
    if (n < 1024) return sign + n + ' B';
    for (var i = 0; i < UNITS.length; i++) {
      n /= 1024;
      if (n < 1024 || i === UNITS.length - 1) {
        return sign + fixed(n, n < 10 ? 2 : n < 100 ? 1 : 0) + ' ' + UNITS[i];
      }
    }
    return sign + n + ' B';
  }
  function fmtDelta(n) { return (n > 0 ? '+' : '') + fmtBytes(n); }
  function fmtNum(n) {
    if (n === null || n === undefined) return '?';
    return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  }
  // Nanoseconds since the series start, in seconds.
  function fmtTime(ns) {
    if (ns === null || ns === undefined || Number.isNaN(ns)) return '?';
    var s = ns / 1e9;
    var a = Math.abs(s);
    return (a >= 100 ? s.toFixed(1) : a >= 1 ? s.toFixed(3) : s.toFixed(4)) + ' s';
  }
  function kindClass(k) { return 'k-' + (KNOWN_KINDS.indexOf(k) >= 0 ? k : 'other'); }
  function devName(ix) { return ix < 0 ? 'host' : 'device ' + ix; }
  function hash(s) {
    var h = 0;
    for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return Math.abs(h);
  }

  // --- DOM ---------------------------------------------------------------------------

  // el('td', 'num', 'text' | Node | [children]): text is always a text node.
  function el(tag, cls, content) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    add(e, content);
    return e;
  }
  function add(e, content) {
    if (content === null || content === undefined) return e;
    if (Array.isArray(content)) {
      content.forEach(function (c) { add(e, c); });
    } else if (content instanceof Node) {
      e.appendChild(content);
    } else {
      e.appendChild(document.createTextNode(clean(content)));
    }
    return e;
  }
  var SVGNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, cls) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (cls) e.setAttribute('class', cls);
    return e;
  }
  function svgText(x, y, text, cls, anchor) {
    var t = svg('text', { x: x, y: y }, cls);
    if (anchor) t.setAttribute('text-anchor', anchor);
    t.appendChild(document.createTextNode(clean(text)));
    return t;
  }
  function body(id) {
    var b = document.getElementById(id);
    if (b) b.textContent = '';
    return b;
  }
  // A colour of report.css, for the canvas.
  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  var tip = document.getElementById('tip');
  function showTip(ev, lines) {
    tip.textContent = '';
    lines.forEach(function (l, i) { tip.appendChild(el('div', i ? '' : 'tip-head', l)); });
    tip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 4) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > window.innerHeight - 4) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }
  function hideTip() { tip.hidden = true; }
  // A legend entry: a swatch coloured by cls (report.css) and its text.
  function key(cls, text) { return el('span', 'key ' + cls, [el('i', 'swatch'), text]); }

  // --- The documents ---------------------------------------------------------------

  // Allocations as typed columns.
  function columns(a) {
    var n = a.n;
    var A = {
      n: n, addr: new Float64Array(n), size: new Float64Array(n), kind: new Uint8Array(n),
      dev: new Int32Array(n), stack: new Float64Array(n), t: new Float64Array(n),
      api: new Uint32Array(n), hex: a.addr_enc === 'hex' ? a.addr : null, apis: a.apis
    };
    var acc = 0;
    for (var i = 0; i < n; i++) {
      if (A.hex) {
        A.addr[i] = parseInt(a.addr[i], 16);
      } else {
        acc += a.addr[i];
        A.addr[i] = acc;
      }
      A.size[i] = a.size[i];
      A.kind[i] = a.kind[i];
      A.dev[i] = a.dev[i];
      A.stack[i] = a.stack[i];
      A.t[i] = a.t[i] === null ? NaN : a.t[i];
      A.api[i] = a.api[i];
    }
    return A;
  }

  // The levels of a document (html.py, docs/guide.md "Two levels of memory"):
  // the driver's allocations, and where a framework handed over its tensors,
  // those tensors with the memory outside its segments. The sites, the flame
  // graph and the allocations table show the level chosen (d.sites,
  // d.stack_sites, d.LA); the address map always the driver's pages (d.A).
  function setLevel(d, name) {
    var l = name === 'tensors' && d.tensorLevel ? d.tensorLevel : d.driverLevel;
    d.level = l === d.tensorLevel ? 'tensors' : 'driver';
    d.sites = l.sites;
    d.stack_sites = l.stack_sites;
    d.LA = l.LA;
  }

  // Stacks by id.
  docs.forEach(function (d, di) {
    d.index = di;
    d.A = columns(d.allocs);
    d.driverLevel = { sites: d.sites, stack_sites: d.stack_sites, LA: d.A };
    d.tensorLevel = d.tensors ? { sites: d.tensors.sites, stack_sites: d.tensors.stack_sites,
      LA: columns(d.tensors.allocs) } : null;
    setLevel(d, 'tensors');
    d.stackIx = new Map();
    d.stacks.id.forEach(function (id, j) { d.stackIx.set(id, j); });
    d.titleLower = new Map();
  });

  function addrHex(A, i) {
    return A.hex ? '0x' + A.hex[i] : '0x' + A.addr[i].toString(16);
  }
  function stackTitle(d, sid) {
    var j = d.stackIx.get(sid);
    if (!sid || j === undefined) return '(no stack recorded)';
    return d.stacks.title[j];
  }
  function stackTitleLower(d, sid) {
    var t = d.titleLower.get(sid);
    if (t === undefined) {
      t = clean(stackTitle(d, sid)).toLowerCase();
      d.titleLower.set(sid, t);
    }
    return t;
  }
  function shortLabel(d) { return d.rank !== null && d.rank !== undefined ? 'rank ' + d.rank : 'pid ' + d.pid; }

  // The whole stack of sid in d, innermost frame first.
  function stackPanel(d, sid, heading) {
    var box = el('div', 'stack-panel');
    box.appendChild(el('h4', '', heading || stackTitle(d, sid)));
    var j = d.stackIx.get(sid);
    if (!sid || j === undefined) {
      box.appendChild(el('p', 'muted', 'no stack recorded'));
      return box;
    }
    var meta = [];
    if (d.stacks.call[j]) meta.push('runtime call ' + clean(d.stacks.call[j]));
    if (d.stacks.tags[j].length) meta.push('tags ' + d.stacks.tags[j].map(clean).join(' \u203a '));
    meta.push('stack ' + sid + (docs.length > 1 ? ' of ' + clean(d.label) : '') + ', innermost frame first');
    box.appendChild(el('p', 'muted', meta.join('; ')));
    var ol = el('ol', 'frames');
    d.stacks.frames[j].forEach(function (f) {
      var k = FR.kind[f];
      var li = el('li', (k === 1 ? 'py' : k === 2 ? 'cuda' : 'native') + (FR.lib[f] ? ' lib' : ''), FR.text[f]);
      if (FR.where[f]) li.appendChild(el('span', 'where', FR.where[f]));
      ol.appendChild(li);
    });
    box.appendChild(ol);
    return box;
  }

  // --- Timeline ------------------------------------------------------------------

  var TW = 1000, TH = 190, ML = 74, MR = 14, MT = 16, MB = 22, LANE = 13;

  function niceStep(span, n) {
    var raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }
  function byteTicks(max) {
    // Steps of 1, 2 or 5 tenths of a power of 1024 read well in MiB and GiB.
    var unit = 1;
    while (unit * 1024 <= max) unit *= 1024;
    var step = niceStep(max / unit, 4) * unit, out = [];
    for (var v = 0; v <= max * 1.0001; v += step) out.push(v);
    return out;
  }
  function fmtTick(ns, step) {
    var digits = Math.max(0, Math.min(6, -Math.floor(Math.log10(step / 1e9) + 1e-9)));
    return (ns / 1e9).toFixed(digits) + ' s';
  }

  function timelineDoc(container, d, heading) {
    var s = d.series, marks = d.marks;
    var wrap = el('div', 'timeline-doc');
    if (heading) wrap.appendChild(el('h3', '', heading));
    container.appendChild(wrap);
    if (!s.t.length) {
      wrap.appendChild(el('p', 'muted', 'This snapshot has no series.'));
      return;
    }
    var devs = [];
    s.cols.forEach(function (c) { if (devs.indexOf(c.device) < 0) devs.push(c.device); });
    devs.sort(function (a, b) { return (a < 0) - (b < 0) || a - b; });
    var tags = [];
    marks.tags.forEach(function (sp) { if (tags.indexOf(sp[0]) < 0) tags.push(sp[0]); });
    var charts = el('div', 'charts');
    function draw(byOrder) {
      charts.textContent = '';
      devs.forEach(function (dev) {
        var cols = s.cols.filter(function (c) { return c.device === dev; });
        // An out-of-memory on a device without a series (pinned host memory) goes on the first chart.
        var ooms = marks.oom.filter(function (o) {
          return o[1] === dev || (devs.indexOf(o[1]) < 0 && dev === devs[0]);
        });
        var fig = chart(d, dev, cols, ooms, tags, byOrder);
        charts.appendChild(fig);
        fitStepLabels(fig.querySelector('svg'));
      });
    }
    var order = s.axis.order;
    if (order) wrap.appendChild(axisChoice(order, draw));
    wrap.appendChild(charts);
    draw(!!(order && order.default));
    var notes = [];
    if (s.dropped) {
      notes.push(fmtNum(s.dropped) + ' changes are not shown: more than 64 (device, kind) pairs occurred.');
    }
    if (tags.length) {
      notes.push('Region tags come from the last ' + fmtNum(d.history.events) + ' events' +
        (d.history.dropped ? ' (' + fmtNum(d.history.dropped) + ' older ones fell out of the history)' : '') + '.');
    }
    notes.push('Process peak (all devices): ' + fmtBytes(d.summary.peak_bytes) + '.');
    wrap.appendChild(el('p', 'muted small', notes.join(' ')));
  }

  // The axis of a timeline drawn from events (axis.py): event order or time,
  // which one and why in words, and a switch to the other. It opens on
  // event order where time says little (one stretch without events takes
  // most of the time axis).
  var axisChoices = 0;
  function axisChoice(order, draw) {
    var box = el('p', 'axis-choice small');
    var note = el('span', 'axis-note');
    var opts = el('span', 'axis-opts');
    var name = 'axis-' + (axisChoices++);
    function say(byOrder) {
      box.dataset.axis = byOrder ? 'order' : 'time';
      note.textContent = byOrder
        ? 'Axis: event order (each allocation or free one step along, whatever the time between them)' +
          (order.why ? ' \u2014 time says little here: ' + order.why + '. ' : '. ')
        : 'Axis: time' + (order.why ? ' \u2014 ' + order.why + '. ' : '. ');
    }
    [['order', 'event order'], ['time', 'time']].forEach(function (o) {
      var r = el('input');
      r.type = 'radio';
      r.name = name;
      r.value = o[0];
      r.checked = (o[0] === 'order') === !!order.default;
      r.addEventListener('change', function () {
        if (!r.checked) return;
        say(o[0] === 'order');
        draw(o[0] === 'order');
      });
      opts.appendChild(el('label', '', [r, ' ' + o[1]]));
    });
    say(!!order.default);  // the first drawing is the caller's
    box.appendChild(note);
    box.appendChild(opts);
    return box;
  }

  // A chart of one device's live bytes, over time or (byOrder) in the order
  // of the changes, each mark at its place in that order (html.py's marks).
  function chart(d, dev, cols, ooms, tags, byOrder) {
    var s = d.series, n = s.t.length, ax = s.axis;
    var tmin = byOrder ? 0 : ax.lo, tmax = byOrder ? ax.order.points - 1 : ax.hi;
    // Where point i, an out-of-memory, a step, a tag span lie on the axis.
    function atPoint(i) { return byOrder ? i : s.t[i]; }
    var H = MT + TH + MB + tags.length * LANE + (tags.length ? 6 : 0);
    var root = svg('svg', { viewBox: '0 0 ' + TW + ' ' + H, role: 'img' }, 'chart');
    root.setAttribute('aria-label', 'live bytes ' + (byOrder ? 'in event order' : 'over time') + ' on ' +
      devName(dev));
    root.dataset.axis = byOrder ? 'order' : 'time';
    // high: the highest within each window (the sum of the kinds' highest:
    // exact for one kind, and for a series drawn from events).
    var total = new Float64Array(n), high = new Float64Array(n), ymax = 1;
    cols.forEach(function (c) {
      for (var i = 0; i < n; i++) {
        total[i] += c.live[i];
        high[i] += c.max[i];
        if (c.max[i] > ymax) ymax = c.max[i];
      }
    });
    var peakI = 0;
    for (var i = 0; i < n; i++) {
      if (high[i] > ymax) ymax = high[i];
      if (high[i] > high[peakI]) peakI = i;
    }
    ymax *= 1.08;
    var span = Math.max(1, tmax - tmin);
    function X(t) { return ML + (t - tmin) / span * (TW - ML - MR); }
    function Y(v) { return MT + TH - v / ymax * TH; }

    var grid = svg('g', {}, 'grid');
    byteTicks(ymax / 1.08).forEach(function (v) {
      grid.appendChild(svg('line', { x1: ML, x2: TW - MR, y1: Y(v), y2: Y(v) }));
      grid.appendChild(svgText(ML - 6, Y(v) + 4, fmtBytes(v), 'tick', 'end'));
    });
    if (byOrder) {
      // The changes counted from the first; the axis named where the time's unit would be.
      grid.appendChild(svgText(ML - 6, MT + TH + 15, 'event', 'tick axis-name', 'end'));
      var every = Math.max(1, niceStep(span, 8));
      for (var k = every; k <= tmax; k += every) {
        grid.appendChild(svg('line', { x1: X(k), x2: X(k), y1: MT, y2: MT + TH }));
        grid.appendChild(svgText(X(k), MT + TH + 15, fmtNum(k), 'tick', 'middle'));
      }
    } else {
      var step = niceStep(span / 1e9, 6) * 1e9;
      for (var t = Math.ceil(tmin / step) * step; t <= tmax; t += step) {
        grid.appendChild(svg('line', { x1: X(t), x2: X(t), y1: MT, y2: MT + TH }));
        grid.appendChild(svgText(X(t), MT + TH + 15, fmtTick(t, step), 'tick', 'middle'));
      }
    }
    root.appendChild(grid);
    root.appendChild(svgText(ML, 11, devName(dev), 'chart-title'));

    // A series drawn from events is a step at each change; windows' points
    // are joined by lines.
    function pts(vals) {
      var p = [];
      for (var i = 0; i < n; i++) {
        var x = X(atPoint(i)).toFixed(1);
        if (s.fine && i > 0) p.push(x + ',' + Y(vals[i - 1]).toFixed(1));
        p.push(x + ',' + Y(vals[i]).toFixed(1));
      }
      return p;
    }
    cols.forEach(function (c) {
      var band = pts(c.max).concat(pts(c.live).reverse());
      root.appendChild(svg('polygon', { points: band.join(' ') }, 'band ' + kindClass(c.kind)));
    });
    cols.forEach(function (c) {
      root.appendChild(svg('polyline', { points: pts(c.live).join(' ') }, 'ln ' + kindClass(c.kind)));
    });
    if (cols.length > 1) root.appendChild(svg('polyline', { points: pts(total).join(' ') }, 'ln total'));
    // The framework's tensors on this device, over its replayed history
    // (their own points): what the program holds inside the segments.
    var ts = d.tensors && d.tensors.series, tcol = null;
    if (ts) ts.cols.forEach(function (c) { if (c.device === dev) tcol = c; });
    if (tcol) {
      var tp = [];
      for (var k = 0; k < ts.t.length; k++) {
        tp.push(X(byOrder ? ts.at[k] : ts.t[k]).toFixed(1) + ',' + Y(tcol.live[k]).toFixed(1));
      }
      root.appendChild(svg('polyline', { points: tp.join(' ') }, 'ln tensors'));
    }

    // The peak of this device's live bytes.
    var px = X(atPoint(peakI)), py = Y(high[peakI]);
    var pk = svg('g', {}, 'peak');
    pk.appendChild(svg('circle', { cx: px, cy: py, r: 4 }));
    var right = px > TW - 160, left = px < ML + 90;
    pk.appendChild(svgText(right ? px - 8 : left ? px + 8 : px, Math.max(py - 8, MT + 10),
      'peak ' + fmtBytes(high[peakI]), 'mark-label', right ? 'end' : left ? 'start' : 'middle'));
    root.appendChild(pk);

    ooms.forEach(function (o) {
      var g = svg('g', {}, 'oom');
      var x = X(byOrder ? o[5] : o[0]);
      g.appendChild(svg('line', { x1: x, x2: x, y1: MT, y2: MT + TH }));
      g.appendChild(svgText(x - 5, MT + TH - 6, 'out of memory: ' + fmtBytes(o[2]), 'mark-label', 'end'));
      var r = svg('rect', { x: x - 4, y: MT, width: 8, height: TH }, 'hit');
      r.addEventListener('mousemove', function (ev) {
        showTip(ev, ['out of memory at ' + fmtTime(o[0]),
          (o[3] || '?') + ' of ' + fmtBytes(o[2]) + ' on ' + devName(o[1]), 'asked from ' + stackTitle(d, o[4])]);
        ev.stopPropagation();
      });
      r.addEventListener('mouseleave', hideTip);
      g.appendChild(r);
      root.appendChild(g);
    });

    // The program's steps (gmt_step): a tick at the top of the chart each,
    // labelled where the label fits (fitStepLabels, once the chart is in the page).
    (d.marks.steps || []).forEach(function (st) {
      var x = X(byOrder ? st[2] : st[0]);
      var g = svg('g', {}, 'step');
      g.appendChild(svg('line', { x1: x, x2: x, y1: MT, y2: MT + 6 }));
      g.appendChild(svgText(x + 2, MT + 14, 'step ' + st[1], 'tick step-label', 'start'));
      var r = svg('rect', { x: x - 2, y: MT, width: 4, height: 8 }, 'hit');
      r.addEventListener('mousemove', function (ev) {
        showTip(ev, ['step ' + st[1] + ' (gmt_step)', fmtTime(st[0])]);
        ev.stopPropagation();
      });
      r.addEventListener('mouseleave', hideTip);
      g.appendChild(r);
      root.appendChild(g);
    });

    // Region tags: one lane each, spans where the allocating thread had it open.
    var laneTop = MT + TH + MB + 4;
    tags.forEach(function (tag, li) {
      var y = laneTop + li * LANE;
      var g = svg('g', {}, 'lane lane' + (li % 6));
      g.appendChild(svgText(ML - 6, y + 9, tag.length > 11 ? tag.slice(0, 10) + '\u2026' : tag, 'tick', 'end'));
      d.marks.tags.forEach(function (sp) {
        if (sp[0] !== tag) return;
        var x0 = X(byOrder ? sp[4] : sp[1]), w = Math.max(2, X(byOrder ? sp[5] : sp[2]) - x0);
        var r = svg('rect', { x: x0, y: y, width: w, height: LANE - 3 }, 'span');
        r.addEventListener('mousemove', function (ev) {
          showTip(ev, ['tag ' + clean(tag), fmtTime(sp[1]) + ' \u2013 ' + fmtTime(sp[2]), fmtNum(sp[3]) + ' events']);
        });
        r.addEventListener('mouseleave', hideTip);
        g.appendChild(r);
      });
      root.appendChild(g);
    });

    // Hover: the values at the nearest point.
    var guide = svg('line', { x1: 0, x2: 0, y1: MT, y2: MT + TH }, 'guide');
    guide.style.display = 'none';
    root.appendChild(guide);
    var hover = svg('rect', { x: ML, y: MT, width: TW - ML - MR, height: TH }, 'hover');
    hover.addEventListener('mousemove', function (ev) {
      var box = root.getBoundingClientRect();
      var vx = (ev.clientX - box.left) / box.width * TW;
      var t = tmin + (vx - ML) / (TW - ML - MR) * span;
      var lo = 0, hi = n - 1;
      if (byOrder) {
        lo = Math.max(0, Math.min(n - 1, Math.round(t)));
      } else {
        while (lo < hi) {
          var mid = (lo + hi) >> 1;
          if (s.t[mid] < t) lo = mid + 1; else hi = mid;
        }
        if (lo > 0 && Math.abs(s.t[lo - 1] - t) < Math.abs(s.t[lo] - t)) lo--;
      }
      guide.setAttribute('x1', X(atPoint(lo)));
      guide.setAttribute('x2', X(atPoint(lo)));
      guide.style.display = '';
      var lines = [fmtTime(s.t[lo]) + (s.fine ? ' (change ' : ' (window ') + (lo + 1) + ' of ' + n + ')'];
      cols.forEach(function (c) {
        var hi = c.max[lo] > c.live[lo] ? ' (highest ' + fmtBytes(c.max[lo]) + ')' : '';
        lines.push(c.kind + ': ' + fmtBytes(c.live[lo]) + hi);
      });
      if (cols.length > 1) lines.push('all kinds: ' + fmtBytes(total[lo]));
      showTip(ev, lines);
    });
    hover.addEventListener('mouseleave', function () { guide.style.display = 'none'; hideTip(); });
    root.insertBefore(hover, guide);

    var fig = el('figure', 'chart-box');
    fig.dataset.device = dev;
    fig.dataset.peak = high[peakI];
    fig.dataset.oom = ooms.length;
    fig.appendChild(root);
    var legend = el('figcaption', 'legend');
    cols.forEach(function (c) {
      legend.appendChild(key(kindClass(c.kind), c.kind + ' ' + fmtBytes(c.live[n - 1])));
    });
    if (cols.length > 1) legend.appendChild(key('total', 'all kinds'));
    if (tcol) {
      legend.appendChild(key('tensors', clean(d.tensors.framework || 'the framework') + '\u2019s tensors ' +
        fmtBytes(tcol.live[tcol.live.length - 1])));
    }
    legend.appendChild(key('band-key', 'highest within a window'));
    if (ooms.length) legend.appendChild(key('oom-key', 'out of memory'));
    fig.appendChild(legend);
    return fig;
  }

  // The steps' labels of a chart in the page: the last (how far the run
  // got), the first, then the others from the left, each kept only where it lies wholly inside the
  // chart (one that would pass the right edge is put left of its tick) and
  // clear of the peak's label and of the labels kept before it. A step
  // without a label keeps its tick and its tooltip.
  function fitStepLabels(root) {
    var labels = Array.from(root.querySelectorAll('g.step text'));
    if (!labels.length) return;
    var peak = root.querySelector('g.peak text');
    var kept = peak ? [peak.getBBox()] : [];
    var GAP = 10;
    function clash(b, o) {
      return b.x < o.x + o.width + GAP && o.x < b.x + b.width + GAP && b.y < o.y + o.height && o.y < b.y + b.height;
    }
    var order = labels.length > 1 ? [labels[labels.length - 1], labels[0]].concat(labels.slice(1, -1)) : labels;
    order.forEach(function (t) {
      var b = t.getBBox();
      if (b.x + b.width > TW) {
        t.setAttribute('x', +t.getAttribute('x') - 4);
        t.setAttribute('text-anchor', 'end');
        b = t.getBBox();
      }
      if (b.x < 0 || b.x + b.width > TW || kept.some(function (o) { return clash(b, o); })) {
        t.remove();
      } else {
        kept.push(b);
      }
    });
  }

  // A time of document d (ns from its base) as a step: between two of its
  // step marks, in proportion; before the first and after the last, at the
  // rate of the nearest interval.
  function stepOf(steps, t) {
    var n = steps.length, lo = 0, hi = n - 2;
    if (t >= steps[n - 1][0]) lo = n - 2;
    else if (t > steps[0][0]) {
      while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (steps[mid][0] <= t) lo = mid; else hi = mid - 1; }
    }
    var a = steps[lo], b = steps[lo + 1], dt = b[0] - a[0];
    return dt > 0 ? a[1] + (t - a[0]) / dt * (b[1] - a[1]) : a[1];
  }

  // Merge: every process's live bytes (all devices and kinds) on one axis:
  // the program's steps when every process marked at least two (gmt_step),
  // else time.
  function processesChart(container) {
    var procs = DATA.merge.processes, H = MT + TH + MB, bySteps = DATA.merge.align === 'step';
    var lo = Infinity, hi = -Infinity;
    if (bySteps) {
      // The axis spans the steps marked, one step either side: the time
      // before the first mark (start-up) and after the last is drawn at
      // the edges, not stretched over the chart.
      procs.forEach(function (p) {
        var st = docs[p.doc].marks.steps;
        lo = Math.min(lo, st[0][1] - 1);
        hi = Math.max(hi, st[st.length - 1][1] + 1);
      });
    }
    function axis(l, t) {
      if (!bySteps) return t + l.p.offset;
      return Math.max(lo, Math.min(hi, stepOf(l.d.marks.steps, t)));
    }
    var lines = procs.map(function (p) {
      var d = docs[p.doc], s = d.series, n = s.t.length, v = new Float64Array(n), t = new Float64Array(n);
      var l = { p: p, d: d, t: t, v: v };
      s.cols.forEach(function (c) { for (var i = 0; i < n; i++) v[i] += c.live[i]; });
      for (var i = 0; i < n; i++) t[i] = axis(l, s.t[i]);
      return l;
    });
    var tmin = Infinity, tmax = -Infinity, ymax = 1;
    lines.forEach(function (l) {
      if (!l.t.length) return;
      tmin = Math.min(tmin, l.t[0]);
      tmax = Math.max(tmax, l.t[l.t.length - 1], axis(l, l.d.end));
      for (var i = 0; i < l.v.length; i++) ymax = Math.max(ymax, l.v[i]);
    });
    if (tmin === Infinity) return;
    ymax *= 1.08;
    var span = Math.max(bySteps ? 1e-9 : 1, tmax - tmin);
    function X(t) { return ML + (t - tmin) / span * (TW - ML - MR); }
    function Y(v) { return MT + TH - v / ymax * TH; }
    function where(t) { return bySteps ? 'step ' + fixed(t, 1) : fmtTime(t - tmin); }
    var root = svg('svg', { viewBox: '0 0 ' + TW + ' ' + H, role: 'img' }, 'chart');
    root.setAttribute('aria-label', 'live bytes of every process over ' + (bySteps ? 'steps' : 'time'));
    if (bySteps) root.dataset.align = 'step';
    var grid = svg('g', {}, 'grid');
    byteTicks(ymax / 1.08).forEach(function (v) {
      grid.appendChild(svg('line', { x1: ML, x2: TW - MR, y1: Y(v), y2: Y(v) }));
      grid.appendChild(svgText(ML - 6, Y(v) + 4, fmtBytes(v), 'tick', 'end'));
    });
    if (bySteps) {
      var every = Math.max(1, niceStep(span, 6));
      for (var k = Math.ceil(tmin / every) * every; k <= tmax; k += every) {
        grid.appendChild(svg('line', { x1: X(k), x2: X(k), y1: MT, y2: MT + TH }));
        grid.appendChild(svgText(X(k), MT + TH + 15, 'step ' + k, 'tick axis-step', 'middle'));
      }
    } else {
      var step = niceStep(span / 1e9, 6) * 1e9;
      for (var r = 0; tmin + r <= tmax; r += step) {
        grid.appendChild(svg('line', { x1: X(tmin + r), x2: X(tmin + r), y1: MT, y2: MT + TH }));
        grid.appendChild(svgText(X(tmin + r), MT + TH + 15, fmtTick(r, step), 'tick', 'middle'));
      }
    }
    root.appendChild(grid);
    root.appendChild(svgText(ML, 11, 'all processes, every device and kind, ' +
      (bySteps ? 'aligned on their steps (gmt_step)' : 'on one clock'), 'chart-title'));
    var legend = el('figcaption', 'legend');
    lines.forEach(function (l, i) {
      var pts = [];
      for (var j = 0; j < l.t.length; j++) pts.push(X(l.t[j]).toFixed(1) + ',' + Y(l.v[j]).toFixed(1));
      root.appendChild(svg('polyline', { points: pts.join(' ') }, 'ln proc lane' + (i % 6)));
      l.d.marks.oom.forEach(function (o) {
        var x = X(axis(l, o[0]));
        var m = svg('line', { x1: x, x2: x, y1: MT, y2: MT + TH }, 'oom-line');
        m.dataset.at = String(axis(l, o[0]));
        root.appendChild(m);
      });
      legend.appendChild(key('lane' + (i % 6), l.p.label + ' ' + fmtBytes(l.v[l.v.length - 1] || 0)));
    });
    var hover = svg('rect', { x: ML, y: MT, width: TW - ML - MR, height: TH }, 'hover');
    hover.addEventListener('mousemove', function (ev) {
      var box = root.getBoundingClientRect();
      var t = tmin + ((ev.clientX - box.left) / box.width * TW - ML) / (TW - ML - MR) * span;
      var out = [where(t)];
      lines.forEach(function (l) {
        var lo = 0, hi = l.t.length - 1;
        if (hi < 0 || t < l.t[0]) return;
        while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (l.t[mid] <= t) lo = mid; else hi = mid - 1; }
        out.push(l.p.label + ': ' + fmtBytes(l.v[lo]));
      });
      showTip(ev, out);
    });
    hover.addEventListener('mouseleave', hideTip);
    root.appendChild(hover);
    var fig = el('figure', 'chart-box processes');
    fig.appendChild(root);
    fig.appendChild(legend);
    container.appendChild(fig);
  }

  function drawTimelines() {
    var b = body('timeline-body');
    if (DATA.mode === 'diff') {
      timelineDoc(b, docs[0], 'older: ' + clean(docs[0].label));
      timelineDoc(b, docs[1], 'newer: ' + clean(docs[1].label));
    } else if (DATA.mode === 'merge') {
      processesChart(b);
      // Many processes: lower charts, so the page stays readable.
      if (DATA.merge.processes.length > 4) TH = 110;
      DATA.merge.processes.forEach(function (p) { timelineDoc(b, docs[p.doc], clean(p.label)); });
    } else {
      timelineDoc(b, docs[0], null);
    }
  }

  // --- Flame graph (icicle) ---------------------------------------------------------

  var ROW = 18, MIN_W = 0.0004;
  var NO_STACK = -2;

  // entries: [doc, stack id, bytes, count]. Frames are merged by their text
  // and place across documents (frame ids are shared).
  function buildTree(entries) {
    var root = { f: -1, v: 0, c: 0, kids: new Map(), depth: 0, parent: null, x0: 0 };
    entries.forEach(function (e) {
      var d = e[0], j = d.stackIx.get(e[1]), bytes = e[2], count = e[3];
      if (!(bytes > 0)) return;
      var frames = e[1] && j !== undefined ? d.stacks.frames[j] : [];
      var node = root;
      root.v += bytes;
      root.c += count;
      var path = frames.length ? frames.slice().reverse() : [NO_STACK];
      path.forEach(function (f) {
        var k = node.kids.get(f);
        if (!k) {
          k = { f: f, v: 0, c: 0, kids: new Map(), depth: node.depth + 1, parent: node, x0: 0 };
          node.kids.set(f, k);
        }
        k.v += bytes;
        k.c += count;
        node = k;
      });
    });
    var flat = [], maxDepth = 0;
    (function layout(node) {
      node.i = flat.length;
      flat.push(node);
      if (node.depth > maxDepth) maxDepth = node.depth;
      var kids = Array.from(node.kids.values()).sort(function (a, b) { return b.v - a.v; });
      var x = node.x0;
      kids.forEach(function (k) { k.x0 = x; x += k.v; layout(k); });
      node.kidList = kids;
    })(root);
    return { root: root, flat: flat, maxDepth: maxDepth };
  }

  function frameName(node, rootName) {
    if (node.f === -1) return rootName;
    if (node.f === NO_STACK) return '(no stack recorded)';
    return FR.text[node.f];
  }

  function flameGraph(container, sources) {
    var controls = el('div', 'controls');
    var search = el('input', 'search');
    search.type = 'search';
    search.placeholder = 'search frames\u2026';
    search.setAttribute('aria-label', 'search frames');
    var select = null;
    if (sources.length > 1) {
      select = el('select', '');
      sources.forEach(function (s, i) { var o = el('option', '', s.label); o.value = i; select.appendChild(o); });
      controls.appendChild(select);
    }
    var reset = el('button', '', 'reset zoom');
    reset.type = 'button';
    var found = el('span', 'muted found', '');
    controls.appendChild(search);
    controls.appendChild(reset);
    controls.appendChild(found);
    var legend = el('span', 'legend', [key('fk-native', 'native'), key('fk-py', 'Python'),
      key('fk-cuda', 'the CUDA call'), key('fk-lib', 'library code (paler)')]);
    controls.appendChild(legend);
    container.appendChild(controls);
    var graph = el('div', 'fg');
    graph.setAttribute('role', 'tree');
    container.appendChild(graph);

    var tree, focus, matched = null;
    var lowerNames = null;

    function load(src) {
      tree = buildTree(src.entries);
      tree.rootName = src.rootName;
      focus = tree.root;
      lowerNames = null;
      graph.dataset.nodes = tree.flat.length;
      graph.dataset.bytes = tree.root.v;
      if (!tree.root.v) {
        graph.textContent = '';
        graph.style.height = 'auto';
        graph.appendChild(el('p', 'muted', src.empty));
        graph.dataset.shown = 0;
        return;
      }
      doSearch();
    }

    function render() {
      graph.textContent = '';
      graph.style.height = ((tree.maxDepth + 1) * ROW + 2) + 'px';
      var fx0 = focus.x0, fw = focus.v, fd = focus.depth;
      var anc = new Set();
      for (var a = focus; a; a = a.parent) anc.add(a);
      var frag = document.createDocumentFragment(), shown = 0;
      tree.flat.forEach(function (node) {
        var x, w;
        if (anc.has(node)) {
          x = 0; w = 1;
        } else if (node.depth > fd && node.x0 >= fx0 && node.x0 < fx0 + fw) {
          x = (node.x0 - fx0) / fw; w = node.v / fw;
        } else {
          return;
        }
        if (w < MIN_W) return;
        var k = node.f >= 0 ? FR.kind[node.f] : -1;
        var cls = 'fg-node ' + (k === 1 ? 'fk-py' : k === 2 ? 'fk-cuda' : k === 0 ? 'fk-native' : 'fk-root') +
          ' h' + (node.f >= 0 ? hash(FR.text[node.f]) % 5 : 0) + (node.f >= 0 && FR.lib[node.f] ? ' fk-lib' : '');
        if (anc.has(node) && node !== focus) cls += ' fg-anc';
        if (matched) cls += matched.has(node) ? ' match' : ' nomatch';
        var div = el('div', cls, frameName(node, tree.rootName));
        div.style.left = (x * 100) + '%';
        div.style.width = (w * 100) + '%';
        div.style.top = (node.depth * ROW) + 'px';
        div.dataset.i = node.i;
        frag.appendChild(div);
        shown++;
      });
      graph.appendChild(frag);
      graph.dataset.shown = shown;
      graph.dataset.focus = focus.i;
    }

    function doSearch() {
      if (!tree.root.v) return;
      var q = clean(search.value).trim().toLowerCase();
      if (!q) {
        matched = null;
        found.textContent = '';
      } else {
        if (!lowerNames) lowerNames = FR.text.map(function (t) { return clean(t).toLowerCase(); });
        matched = new Set();
        var bytes = 0;
        tree.flat.forEach(function (node) {
          var name = node.f >= 0 ? lowerNames[node.f] : frameName(node, tree.rootName).toLowerCase();
          if (name.indexOf(q) >= 0) {
            matched.add(node);
            var outer = false;
            for (var p = node.parent; p; p = p.parent) if (matched.has(p)) { outer = true; break; }
            if (!outer) bytes += node.v;
          }
        });
        found.textContent = fmtNum(matched.size) + ' frames match: ' + fmtBytes(bytes) + ' (' +
          (tree.root.v ? (bytes / tree.root.v * 100).toFixed(1) : '0') + '% of ' + fmtBytes(tree.root.v) + ')';
      }
      render();
    }

    graph.addEventListener('click', function (ev) {
      var i = ev.target.dataset ? ev.target.dataset.i : undefined;
      if (i === undefined) return;
      var node = tree.flat[+i];
      focus = node === focus && node.parent ? node.parent : node;
      render();
    });
    graph.addEventListener('mousemove', function (ev) {
      var i = ev.target.dataset ? ev.target.dataset.i : undefined;
      if (i === undefined) { hideTip(); return; }
      var node = tree.flat[+i];
      var lines = [frameName(node, tree.rootName)];
      if (node.f >= 0) {
        lines.push(['native frame', 'Python frame', 'native frame of the CUDA call'][FR.kind[node.f]]);
        if (FR.where[node.f]) lines.push(FR.where[node.f]);
      }
      lines.push(fmtBytes(node.v) + ' (' + (node.v / tree.root.v * 100).toFixed(1) + '%) in ' +
        fmtNum(node.c) + ' allocations');
      showTip(ev, lines);
    });
    graph.addEventListener('mouseleave', hideTip);
    var timer = null;
    search.addEventListener('input', function () {
      clearTimeout(timer);
      timer = setTimeout(doSearch, 120);
    });
    reset.addEventListener('click', function () { focus = tree.root; render(); });
    if (select) select.addEventListener('change', function () { load(sources[+select.value]); });
    load(sources[0]);
  }

  // Live bytes by stack (not by site: a site's stacks have frames of their own).
  function siteEntries(d) {
    var s = d.stack_sites, out = [];
    for (var i = 0; i < s.stack.length; i++) out.push([d, s.stack[i], s.live[i], s.count[i]]);
    return out;
  }

  function source(label, entries, rootName, empty) {
    return { label: label, entries: entries, rootName: rootName, empty: empty || 'No live memory.' };
  }

  function drawFlame() {
    var b = body('flame-body');
    var sources;
    if (DATA.mode === 'diff') {
      var df = DATA.diff, grow = [];
      for (var i = 0; i < df.title.length; i++) {
        if (df.delta_bytes[i] > 0) {
          grow.push([docs[df.doc[i]], df.stack[i], df.delta_bytes[i], Math.max(0, df.delta_count[i])]);
        }
      }
      sources = [source('growth from older to newer', grow, 'all growth', 'No site grew.'),
        source('live in the newer snapshot', siteEntries(docs[1]), 'all live memory (newer)'),
        source('live in the older snapshot', siteEntries(docs[0]), 'all live memory (older)')];
    } else if (DATA.mode === 'merge') {
      var all = [];
      docs.forEach(function (d) { all = all.concat(siteEntries(d)); });
      sources = [source('all processes', all, 'all live memory (' + docs.length + ' processes)')];
      DATA.merge.processes.forEach(function (p) {
        sources.push(source(p.label, siteEntries(docs[p.doc]), 'all live memory of ' + p.label));
      });
    } else {
      sources = [source('live', siteEntries(docs[0]), 'all live memory')];
    }
    flameGraph(b, sources);
  }

  // --- Tables -------------------------------------------------------------------------

  // A sortable, filterable table that shows one page of its rows at a time, so
  // a million rows cost a million-entry index, not a million DOM rows.
  // cols: [{key, label, num, val(r) (sort key), fmt(r) (text or Node), text(r)
  // (lower-case text for the filter; none: not filtered), cls(r)}].
  function Table(container, opts) {
    var cols = opts.cols, n = opts.n, self = this;
    var pageSize = opts.pageSize || 50, page = 0;
    var sortCol = opts.sort || 0, desc = opts.desc !== false;
    var order = null, view = null, query = '';
    var root = el('div', 'tbl');
    root.id = opts.id;
    var controls = el('div', 'controls');
    var filter = el('input', 'filter');
    filter.type = 'search';
    filter.placeholder = opts.placeholder || 'filter\u2026';
    filter.setAttribute('aria-label', 'filter rows');
    var count = el('span', 'muted count', '');
    controls.appendChild(filter);
    controls.appendChild(count);
    root.appendChild(controls);
    var scroller = el('div', 'tbl-scroll');
    var table = el('table', 'dyn');
    var thead = el('thead'), htr = el('tr');
    cols.forEach(function (c, ci) {
      var th = el('th', c.num && !c.left ? 'num' : '', c.label);
      th.tabIndex = 0;
      th.dataset.col = ci;
      if (c.title) th.title = c.title;
      htr.appendChild(th);
    });
    thead.appendChild(htr);
    table.appendChild(thead);
    var tbody = el('tbody');
    table.appendChild(tbody);
    scroller.appendChild(table);
    root.appendChild(scroller);
    var pager = el('div', 'pager');
    function btn(label, fn) {
      var b = el('button', '', label);
      b.type = 'button';
      b.addEventListener('click', fn);
      pager.appendChild(b);
      return b;
    }
    var first = btn('\u00ab first', function () { go(0); });
    var prev = btn('\u2039 previous', function () { go(page - 1); });
    var info = el('span', 'page-info', '');
    pager.appendChild(info);
    var next = btn('next \u203a', function () { go(page + 1); });
    var last = btn('last \u00bb', function () { go(Infinity); });
    var sizeSel = el('select', '');
    [25, 50, 100, 500].forEach(function (s) {
      var o = el('option', '', s + ' rows');
      o.value = s;
      if (s === pageSize) o.selected = true;
      sizeSel.appendChild(o);
    });
    sizeSel.addEventListener('change', function () { pageSize = +sizeSel.value; go(0); });
    pager.appendChild(sizeSel);
    root.appendChild(pager);
    var detail = el('div', 'detail');
    root.appendChild(detail);
    container.appendChild(root);

    function sort() {
      var c = cols[sortCol];
      order = new Uint32Array(n);
      for (var i = 0; i < n; i++) order[i] = i;
      var keys;
      if (c.num) {
        keys = new Float64Array(n);
        for (i = 0; i < n; i++) keys[i] = c.val(i);
        var sgn = desc ? -1 : 1;
        order.sort(function (a, b) {
          var x = keys[a], y = keys[b];
          return x === y || (x !== x && y !== y) ? a - b : x !== x ? 1 : y !== y ? -1 : (x < y ? -sgn : sgn);
        });
      } else {
        keys = new Array(n);
        for (i = 0; i < n; i++) keys[i] = String(c.val(i)).toLowerCase();
        order.sort(function (a, b) {
          var x = keys[a], y = keys[b];
          return x === y ? a - b : ((x < y) !== desc ? -1 : 1);
        });
      }
      htr.childNodes.forEach(function (th, ci) {
        th.setAttribute('aria-sort', ci === sortCol ? (desc ? 'descending' : 'ascending') : 'none');
      });
    }

    // Terms all must match; "col:text" matches in one column (by key or label).
    function applyFilter() {
      var terms = query.split(/\s+/).filter(Boolean).map(function (t) {
        var m = /^([a-z_]+):(.*)$/.exec(t), ci = -1;
        if (m) {
          for (var k = 0; k < cols.length; k++) {
            if (cols[k].key === m[1] || cols[k].label.toLowerCase().indexOf(m[1]) === 0) { ci = k; break; }
          }
        }
        return ci >= 0 ? { col: ci, s: m[2] } : { col: -1, s: t };
      });
      if (!terms.length) {
        view = order;
      } else {
        var out = new Uint32Array(n), m = 0;
        var textCols = cols.filter(function (c) { return c.text; });
        for (var i = 0; i < n; i++) {
          var r = order[i], ok = true;
          for (var j = 0; j < terms.length && ok; j++) {
            var term = terms[j];
            if (term.col >= 0) {
              var tc = cols[term.col];
              ok = !!tc.text && tc.text(r).indexOf(term.s) >= 0;
            } else {
              ok = false;
              for (var k = 0; k < textCols.length; k++) {
                if (textCols[k].text(r).indexOf(term.s) >= 0) { ok = true; break; }
              }
            }
          }
          if (ok) out[m++] = r;
        }
        view = out.subarray(0, m);
      }
      root.dataset.rows = n;
      root.dataset.matched = view.length;
      count.textContent = view.length === n ? fmtNum(n) + ' rows' :
        fmtNum(view.length) + ' of ' + fmtNum(n) + ' rows match';
    }

    function go(p) {
      var pages = Math.max(1, Math.ceil(view.length / pageSize));
      page = Math.max(0, Math.min(pages - 1, p));
      tbody.textContent = '';
      var frag = document.createDocumentFragment();
      var end = Math.min(view.length, (page + 1) * pageSize);
      for (var i = page * pageSize; i < end; i++) {
        var r = view[i], tr = el('tr');
        tr.dataset.r = r;
        for (var ci = 0; ci < cols.length; ci++) {
          var c = cols[ci];
          tr.appendChild(el('td', (c.num && !c.left ? 'num ' : '') + (c.cls ? c.cls(r) : ''), c.fmt(r)));
        }
        frag.appendChild(tr);
      }
      tbody.appendChild(frag);
      info.textContent = !view.length ? 'no rows' :
        'rows ' + fmtNum(page * pageSize + 1) + '\u2013' + fmtNum(end) + ' of ' + fmtNum(view.length);
      first.disabled = prev.disabled = page === 0;
      next.disabled = last.disabled = page >= pages - 1;
      pager.hidden = view.length <= 25;
      root.dataset.page = page;
    }

    htr.addEventListener('click', function (ev) {
      var th = ev.target.closest('th');
      if (!th) return;
      var ci = +th.dataset.col;
      if (ci === sortCol) desc = !desc; else { sortCol = ci; desc = !!cols[ci].num; }
      sort();
      applyFilter();
      go(0);
    });
    htr.addEventListener('keydown', function (ev) {
      if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); ev.target.click(); }
    });
    var timer = null;
    filter.addEventListener('input', function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        query = clean(filter.value).trim().toLowerCase();
        applyFilter();
        go(0);
      }, n > 50000 ? 250 : 60);
    });
    tbody.addEventListener('click', function (ev) {
      var tr = ev.target.closest('tr');
      if (!tr || !opts.onRow) return;
      tbody.querySelectorAll('tr.sel').forEach(function (x) { x.classList.remove('sel'); });
      tr.classList.add('sel');
      detail.textContent = '';
      var node = opts.onRow(+tr.dataset.r);
      if (node) detail.appendChild(node);
    });

    this.setFilter = function (q) {
      filter.value = q;
      query = clean(q).trim().toLowerCase();
      applyFilter();
      go(0);
    };
    sort();
    applyFilter();
    go(0);
    self.root = root;
  }

  function flags(growing, suspect) {
    var f = [];
    if (growing) f.push('growing');
    if (suspect) f.push('leak suspect');
    return f.join(', ');
  }

  // A table column: get(r) is row r's value and sort key; opts: num (sorts as
  // a number, aligns right), left (a number shown on the left), fmt(value, r)
  // (the cell: text or a Node), text (filtered on: true for the cell's text,
  // or a function of r giving lower-case text), cls(r), title.
  function column(key, label, get, opts) {
    opts = opts || {};
    var fmt = opts.fmt || function (v) { return v; };
    var c = { key: key, label: label, num: !!opts.num, left: !!opts.left, title: opts.title, cls: opts.cls,
      val: get, fmt: function (r) { return fmt(get(r), r); } };
    if (opts.text === true) {
      c.text = function (r) { return clean(c.fmt(r)).toLowerCase(); };
    } else if (opts.text) {
      c.text = opts.text;
    }
    return c;
  }
  function nowrap() { return 'nowrap'; }
  // The documents whose allocations the page shows: the newer of a diff, every
  // process of a merge in rank order.
  function processDocs() {
    if (DATA.mode === 'diff') return [docs[1]];
    if (DATA.mode === 'merge') return DATA.merge.processes.map(function (p) { return docs[p.doc]; });
    return docs;
  }
  var BYTES = { num: true, fmt: fmtBytes }, COUNT = { num: true, fmt: fmtNum };

  function drawSites() {
    var b = body('sites-body');
    if (DATA.mode === 'diff') {
      var df = DATA.diff;
      var liveIn = function (r) {
        return !df.old_count[r] ? 'newer only' : !df.new_count[r] ? 'older only' : 'both';
      };
      new Table(b, {
        id: 'diff-table', n: df.title.length, sort: 3, placeholder: 'filter sites\u2026',
        cols: [
          column('site', 'site', function (r) { return df.title[r]; },
            { text: function (r) { return stackTitleLower(docs[df.doc[r]], df.stack[r]); } }),
          column('older', 'older', function (r) { return df.old_bytes[r]; }, BYTES),
          column('newer', 'newer', function (r) { return df.new_bytes[r]; }, BYTES),
          column('change', 'change', function (r) { return df.delta_bytes[r]; }, {
            num: true, fmt: fmtDelta,
            cls: function (r) { return df.delta_bytes[r] > 0 ? 'up' : df.delta_bytes[r] < 0 ? 'down' : ''; } }),
          column('count', 'count older \u2192 newer', function (r) { return df.delta_count[r]; }, {
            num: true,
            fmt: function (v, r) { return fmtNum(df.old_count[r]) + ' \u2192 ' + fmtNum(df.new_count[r]); } }),
          column('where', 'live in', liveIn, { text: true })],
        onRow: function (r) { return stackPanel(docs[df.doc[r]], df.stack[r]); }
      });
      return;
    }
    if (DATA.mode === 'merge') {
      var m = DATA.merge;
      var cols = [
        column('site', 'site', function (r) { return m.title[r]; },
          { text: function (r) { return stackTitleLower(docs[m.doc[r]], m.stack[r]); } }),
        column('live', 'live, all', function (r) { return m.live[r]; }, BYTES),
        column('count', 'count', function (r) { return m.count[r]; }, COUNT)];
      m.processes.forEach(function (p, pi) {
        cols.push(column('p' + pi, shortLabel(docs[p.doc]), function (r) { return m.by[r][pi]; }, {
          num: true, title: p.label, fmt: function (v) { return v ? fmtBytes(v) : '\u2013'; } }));
      });
      new Table(b, {
        id: 'merge-table', n: m.title.length, sort: 1, cols: cols, placeholder: 'filter sites\u2026',
        onRow: function (r) { return stackPanel(docs[m.doc[r]], m.stack[r]); }
      });
      return;
    }
    var d = docs[0], s = d.sites;
    new Table(b, {
      id: 'sites-table', n: s.stack.length, sort: 1, placeholder: 'filter sites\u2026',
      cols: [
        column('site', 'site', function (r) { return stackTitle(d, s.stack[r]); },
          { text: function (r) { return stackTitleLower(d, s.stack[r]); } }),
        column('live', 'live', function (r) { return s.live[r]; }, BYTES),
        column('count', 'count', function (r) { return s.count[r]; }, COUNT),
        column('peak', 'peak', function (r) { return s.peak[r]; }, BYTES),
        column('growth', 'growth', function (r) { return s.growth[r] === null ? -1 : s.growth[r]; },
          { num: true, fmt: function (v) { return v < 0 ? '\u2014' : fmtBytes(v); },
            title: 'for a site judged growing: what it added after its first round (a round: a step the ' +
              'program marks, else a stretch of its allocations and frees); \u2014 for the others' }),
        column('allocs', 'allocations made', function (r) { return s.allocs[r]; }, COUNT),
        column('suspect', 'suspect', function (r) { return (s.suspect[r] ? 2 : 0) + (s.growing[r] ? 1 : 0); }, {
          num: true, left: true, text: true,
          fmt: function (v, r) { return flags(s.growing[r], s.suspect[r]); },
          cls: function (r) { return s.suspect[r] || s.growing[r] ? 'bad' : ''; } })],
      onRow: function (r) { return stackPanel(d, s.stack[r]); }
    });
  }

  function drawAllocations() {
    var b = body('allocations-body');
    var shown = processDocs();
    var n = 0;
    shown.forEach(function (d) { n += d.LA.n; });
    if (!n) {
      b.appendChild(el('p', 'muted', 'No live allocations.'));
      return;
    }
    // Row r is allocation rowIx[r] of document rowDoc[r].
    var rowDoc = new Uint16Array(n), rowIx = new Uint32Array(n), k = 0;
    shown.forEach(function (d) {
      for (var i = 0; i < d.LA.n; i++) { rowDoc[k] = d.index; rowIx[k] = i; k++; }
    });
    function D(r) { return docs[rowDoc[r]]; }
    function A(r) { return docs[rowDoc[r]].LA; }
    function stack(r) { return A(r).stack[rowIx[r]]; }
    function api(r) { return A(r).apis[A(r).api[rowIx[r]]] || ''; }
    var cols = [];
    if (shown.length > 1) {
      cols.push(column('process', 'process', function (r) { return rowDoc[r]; },
        { fmt: function (v, r) { return shortLabel(D(r)); }, text: true }));
    }
    cols.push(
      column('address', 'address', function (r) { return A(r).addr[rowIx[r]]; }, {
        num: true, left: true, text: true, fmt: function (v, r) { return addrHex(A(r), rowIx[r]); },
        cls: function () { return 'mono nowrap'; } }),
      column('size', 'size', function (r) { return A(r).size[rowIx[r]]; }, BYTES),
      column('kind', 'kind', function (r) { return KINDS[A(r).kind[rowIx[r]]]; }, { text: true, cls: nowrap }),
      column('device', 'device', function (r) { return A(r).dev[rowIx[r]]; },
        { num: true, left: true, fmt: devName, text: true, cls: nowrap }),
      column('site', 'site', function (r) { return stackTitle(D(r), stack(r)); },
        { text: function (r) { return stackTitleLower(D(r), stack(r)); } }),
      column('time', 'time', function (r) { return A(r).t[rowIx[r]]; },
        { num: true, fmt: fmtTime, title: 'when it was made, from the start of the series' }),
      column('api', 'api', api, { text: true, cls: nowrap }));
    new Table(b, {
      id: 'alloc-table', n: n, cols: cols, sort: cols.findIndex(function (c) { return c.key === 'size'; }),
      placeholder: 'filter allocations (e.g. kind:async site:forward 0x7f)\u2026',
      onRow: function (r) {
        var d = D(r), L = d.LA, i = rowIx[r];
        return stackPanel(d, L.stack[i], addrHex(L, i) + ': ' + fmtBytes(L.size[i]) + ' of ' +
          KINDS[L.kind[i]] + ' memory on ' + devName(L.dev[i]) + ', from ' + stackTitle(d, L.stack[i]));
      }
    });
  }

  // --- Address map ---------------------------------------------------------------------

  var MAP_H = 360;

  // Page occupancy of the allocations idx (sorted by address) at granularity g,
  // as segments of pages: [first page, pages, bytes used in them].
  function pageSegments(A, idx, g) {
    var start = [], count = [], used = [];
    var cur = -1, curUsed = 0;
    function flush() {
      if (cur >= 0) { start.push(cur); count.push(1); used.push(curUsed); }
      cur = -1; curUsed = 0;
    }
    function part(p, bytes) {
      if (p === cur) { curUsed += bytes; return; }
      flush();
      cur = p; curUsed = bytes;
    }
    for (var k = 0; k < idx.length; k++) {
      var i = idx[k], a = A.addr[i], s = A.size[i];
      if (!(s > 0)) continue;
      var p0 = Math.floor(a / g), p1 = Math.floor((a + s - 1) / g);
      if (p0 === p1) {
        part(p0, s);
      } else {
        part(p0, (p0 + 1) * g - a);
        if (p1 - p0 > 1) {
          flush();
          start.push(p0 + 1); count.push(p1 - p0 - 1); used.push((p1 - p0 - 1) * g);
        }
        part(p1, a + s - p1 * g);
      }
    }
    flush();
    return { start: start, count: count, used: used };
  }

  function deviceMap(container, d, dev, devInfo) {
    var A = d.A, g = devInfo ? devInfo.granularity : 2097152;
    var kindsHere = [];
    for (var i = 0; i < A.n; i++) {
      if (A.dev[i] === dev && KINDS[A.kind[i]] !== 'vmm' && kindsHere.indexOf(A.kind[i]) < 0) {
        kindsHere.push(A.kind[i]);
      }
    }
    if (!kindsHere.length) return;
    var box = el('div', 'map-box');
    box.dataset.device = dev;
    container.appendChild(box);
    box.appendChild(el('h3', '', (docs.length > 1 ? clean(d.label) + ', ' : '') + devName(dev)));
    var head = el('div', 'controls');
    var sel = el('select', '');
    var devKind = KINDS.indexOf('device');
    var o = el('option', '', 'device memory (cuMemAlloc), as the snapshot\u2019s pages');
    o.value = 'device';
    if (kindsHere.indexOf(devKind) >= 0) sel.appendChild(o);
    o = el('option', '', 'every kind but vmm handles');
    o.value = 'all';
    sel.appendChild(o);
    head.appendChild(sel);
    var stats = el('span', 'muted', '');
    head.appendChild(stats);
    box.appendChild(head);
    var canvas = el('canvas', 'addr-map');
    box.appendChild(canvas);
    var cellNote = el('p', 'muted small', '');
    box.appendChild(cellNote);
    var legend = el('div', 'legend');
    ['below 25%', 'below 50%', 'below 75%', 'below 100%', 'full'].forEach(function (t, li) {
      legend.appendChild(key('occ' + li, t));
    });
    legend.appendChild(key('gap', 'a gap in the address space'));
    box.appendChild(legend);
    if (devInfo && devInfo.pages) {
      var pg = devInfo.pages;
      box.appendChild(el('p', 'muted small', 'The snapshot counts ' + fmtNum(pg.pages) + ' pages of ' +
        fmtBytes(pg.granularity) + ' holding device memory, ' + fmtNum(pg.partial) + ' partly used, stranding ' +
        fmtBytes(pg.stranded_bytes) + '.'));
    }

    var idx = [], segs, cells;
    function compute() {
      var which = sel.value;
      idx = [];
      for (var i = 0; i < A.n; i++) {
        if (A.dev[i] !== dev) continue;
        var kn = KINDS[A.kind[i]];
        if (kn === 'vmm' || (which === 'device' && kn !== 'device')) continue;
        idx.push(i);
      }
      idx.sort(function (x, y) { return A.addr[x] - A.addr[y]; });
      segs = pageSegments(A, idx, g);
      var pages = 0, partial = 0, stranded = 0, runs = 0, prevEnd = -1;
      for (var k = 0; k < segs.start.length; k++) {
        pages += segs.count[k];
        if (segs.count[k] === 1 && segs.used[k] < g) { partial++; stranded += g - segs.used[k]; }
        if (segs.start[k] !== prevEnd) runs++;
        prevEnd = segs.start[k] + segs.count[k];
      }
      box.dataset.pages = pages;
      box.dataset.partial = partial;
      box.dataset.stranded = stranded;
      box.dataset.allocations = idx.length;
      stats.textContent = fmtNum(idx.length) + ' allocations on ' + fmtNum(pages) + ' pages of ' + fmtBytes(g) +
        ' in ' + fmtNum(runs) + ' runs; ' + fmtNum(partial) + ' partly used, stranding ' + fmtBytes(stranded);
      return { pages: pages, runs: runs };
    }

    function draw() {
      var info = compute();
      var W = Math.max(300, Math.min(1400, box.clientWidth || 1000));
      var gaps = info.runs - 1;
      var C = info.pages + gaps, cs, per = 1;
      var maxCells = Math.floor(W / 2) * Math.floor(MAP_H / 2);
      if (C > maxCells) {
        // Too many pages for a cell each: each cell is several, no gap cells.
        per = Math.ceil(info.pages / maxCells);
        gaps = 0;
        C = Math.ceil(info.pages / per);
        cs = 2;
      } else {
        cs = Math.max(2, Math.min(16, Math.floor(Math.sqrt(W * MAP_H / Math.max(1, C)))));
      }
      var perRow = Math.floor(W / cs), rows = Math.max(1, Math.ceil(C / perRow));
      // Cells: fraction used (-1: a gap), the first page and pages each holds.
      var frac = new Float32Array(C), first = new Float64Array(C), held = new Float64Array(C);
      var c = 0, acc = 0, inCell = 0, prevEnd = -1;
      for (var k = 0; k < segs.start.length; k++) {
        var p = segs.start[k], left = segs.count[k], perPage = segs.used[k] / segs.count[k];
        if (gaps && prevEnd >= 0 && p !== prevEnd) { frac[c] = -1; first[c] = prevEnd; held[c] = p - prevEnd; c++; }
        prevEnd = p + left;
        while (left > 0) {
          if (inCell === 0) first[c] = p;
          var take = Math.min(left, per - inCell);
          acc += perPage * take; inCell += take; left -= take; p += take;
          if (inCell === per) { frac[c] = acc / (per * g); held[c] = per; c++; acc = 0; inCell = 0; }
        }
      }
      if (inCell) { frac[c] = acc / (inCell * g); held[c] = inCell; c++; }
      C = c;
      var dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(perRow * cs * dpr);
      canvas.height = Math.round(rows * cs * dpr);
      canvas.style.width = (perRow * cs) + 'px';
      canvas.style.height = (rows * cs) + 'px';
      var ctx = canvas.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      var colours = [0, 1, 2, 3, 4].map(function (i) { return cssVar('--occ-' + i); });
      var gapColour = cssVar('--map-gap');
      var inset = cs >= 5 ? 1 : 0;
      var last = null;
      for (var q = 0; q < C; q++) {
        var f = frac[q];
        var col = f < 0 ? gapColour : f >= 1 ? colours[4] : colours[Math.min(3, Math.floor(f * 4))];
        if (col !== last) { ctx.fillStyle = col; last = col; }
        ctx.fillRect((q % perRow) * cs, Math.floor(q / perRow) * cs, cs - inset, cs - inset);
      }
      box.dataset.cells = C;
      box.dataset.pagesPerCell = per;
      cellNote.textContent = per > 1 ? 'Too many pages for a cell each: each cell is ' + fmtNum(per) +
        ' pages, coloured by their mean occupancy, and gaps are left out.' : '';
      canvas.onmousemove = function (ev) {
        var r = canvas.getBoundingClientRect();
        var q = Math.floor((ev.clientY - r.top) / cs) * perRow + Math.floor((ev.clientX - r.left) / cs);
        if (q < 0 || q >= C) { hideTip(); return; }
        var lo = first[q] * g, hi = lo + held[q] * g;
        if (frac[q] < 0) {
          showTip(ev, ['a gap of ' + fmtBytes(hi - lo), 'from 0x' + lo.toString(16)]);
          return;
        }
        // The allocations overlapping [lo, hi): idx is sorted by address.
        var a = 0, z = idx.length;
        while (a < z) {
          var mid = (a + z) >> 1;
          if (A.addr[idx[mid]] + A.size[idx[mid]] <= lo) a = mid + 1; else z = mid;
        }
        var names = [], nAlloc = 0;
        for (var j = a; j < idx.length && A.addr[idx[j]] < hi; j++) {
          nAlloc++;
          if (names.length < 4) {
            names.push(addrHex(A, idx[j]) + ' ' + fmtBytes(A.size[idx[j]]) + ' ' + stackTitle(d, A.stack[idx[j]]));
          }
        }
        var lines = [(held[q] > 1 ? fmtNum(held[q]) + ' pages from ' : 'page ') + '0x' + lo.toString(16) +
          ' (' + fmtBytes(hi - lo) + ')', (frac[q] * 100).toFixed(1) + '% used: ' + fmtBytes(frac[q] * (hi - lo)) +
          ' by ' + fmtNum(nAlloc) + ' allocations'];
        if (nAlloc > names.length) names.push('\u2026 and ' + fmtNum(nAlloc - names.length) + ' more');
        showTip(ev, lines.concat(names));
      };
      canvas.onmouseleave = hideTip;
    }
    sel.addEventListener('change', draw);
    draw();
  }

  function drawMaps() {
    var b = body('addrmap-body');
    var shown = processDocs();
    shown.forEach(function (d) {
      var devs = [];
      for (var i = 0; i < d.A.n; i++) if (d.A.dev[i] >= 0 && devs.indexOf(d.A.dev[i]) < 0) devs.push(d.A.dev[i]);
      devs.sort(function (x, y) { return x - y; });
      devs.forEach(function (dev) {
        deviceMap(b, d, dev, d.devices.filter(function (x) { return x.index === dev; })[0]);
      });
    });
    if (!b.childNodes.length) b.appendChild(el('p', 'muted', 'No device memory is live.'));
  }

  // The choice of level, where a document has two: the sections that read
  // it drawn again.
  function drawLevels() {
    var bar = document.getElementById('levels');
    var two = docs.filter(function (d) { return d.tensorLevel; });
    if (!bar || !two.length) return;
    bar.hidden = false;
    bar.textContent = '';
    var name = clean(two[0].tensors.framework || 'the framework');
    bar.appendChild(el('span', '', 'Sites, flame graph and allocations of: '));
    [['tensors', name + '\u2019s tensors, and the memory outside its segments'],
      ['driver', 'the driver\u2019s allocations (' + name + '\u2019s segments)']].forEach(function (lv) {
      var label = el('label', 'level'), input = el('input', '');
      input.type = 'radio';
      input.name = 'level';
      input.value = lv[0];
      input.checked = two[0].level === lv[0];
      input.addEventListener('change', function () {
        docs.forEach(function (d) { setLevel(d, lv[0]); });
        document.body.dataset.level = lv[0];
        drawFlame();
        drawSites();
        drawAllocations();
      });
      label.appendChild(input);
      label.appendChild(document.createTextNode(' ' + lv[1]));
      bar.appendChild(label);
    });
    document.body.dataset.level = two[0].level;
  }

  // --- Start ----------------------------------------------------------------------------

  drawLevels();
  drawTimelines();
  drawFlame();
  drawSites();
  drawAllocations();
  drawMaps();
  // For tests and the curious: the formatting the page uses.
  window.gmtReport = { fmtBytes: fmtBytes, clean: clean, fmtTime: fmtTime };
  document.body.dataset.scriptMs = (performance.now() - started).toFixed(1);
  document.body.dataset.renderMs = performance.now().toFixed(1);
  document.body.dataset.ready = '1';
})();
