// kgc web view: draws the ownership graph served as JSON by kgc's graph
// endpoint. Plain JS, no dependencies; everything is served by kgc itself.
'use strict';
(function () {
  const GRAPH = 'debug/controllers/garbage-collector-controller/graph';
  const NAMESPACES = 'ui/namespaces';
  const REFRESH_MS = 5000;
  const MAX_NODES = 3000;
  // The stuck filter: objects deleting for longer than this (kgc stuck's
  // default --older-than), with their components.
  const STUCK_AFTER_S = 300;
  const W = 200, H = 50, HGAP = 26, VGAP = 78, PAD = 30, CGAP = 60;
  const STATES = {
    live: ['Live', 'observed, not being deleted'],
    deleting: ['Deleting', 'deletionTimestamp set; no collector finalizer pending'],
    waitingForDependents: ['Waiting on dependents', 'Foreground deletion: waits until no blocking dependent remains'],
    orphaning: ['Orphaning', 'deleting with the orphan finalizer: its dependents are being released'],
    placeholder: ['Placeholder', 'referenced by a dependent but never observed (virtual); kgc verifies it before deciding'],
    absent: ['Dangling', 'referenced by a dependent and known not to exist'],
  };
  const BADGE = { live: '', deleting: 'deleting', waitingForDependents: 'waiting', orphaning: 'orphaning', placeholder: 'placeholder', absent: 'dangling' };

  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const ui = {
    namespace: params.get('namespace'), // null: not chosen yet; '': all namespaces
    focus: params.get('uid') || '',
    // ?kind=K&name=N[&namespace=NS]: focus on that object (resolved to its uid).
    object: params.get('kind') && params.get('name') ? { kind: params.get('kind'), name: params.get('name'), namespace: params.get('namespace') || '' } : null,
    selected: params.get('select') || '',
    stuck: params.get('stuck') === '1',
    graph: null,
    byUID: new Map(),
    timer: null,
    loading: false,
  };

  function esc(s) {
    return String(s == null ? '' : s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
  }
  function trunc(s, n) { return s.length > n ? s.slice(0, n - 1) + '…' : s; }
  function label(n) { return n.kind + ' ' + (n.namespace ? n.namespace + '/' : '') + n.name; }

  function setStatus(text) { $('status').textContent = text; }
  function setBanner(text, isError) {
    const b = $('banner');
    b.hidden = !text;
    b.textContent = text || '';
    b.className = isError ? 'error' : '';
  }

  async function getJSON(url) {
    const res = await fetch(url, { headers: { Accept: 'application/json' }, cache: 'no-store' });
    if (!res.ok) {
      const text = (await res.text()).trim();
      throw new Error(text || res.status + ' ' + res.statusText);
    }
    return res.json();
  }

  function syncURL() {
    const p = new URLSearchParams();
    if (ui.namespace) p.set('namespace', ui.namespace);
    if (ui.focus) p.set('uid', ui.focus);
    if (ui.selected) p.set('select', ui.selected);
    if (ui.stuck) p.set('stuck', '1');
    const q = p.toString();
    history.replaceState(null, '', location.pathname + (q ? '?' + q : ''));
  }

  async function loadNamespaces() {
    const data = await getJSON(NAMESPACES);
    const sel = $('namespace');
    const names = data.namespaces.map((n) => n.name);
    if (ui.namespace === null) {
      // Small graphs: everything; large ones: one namespace at a time.
      ui.namespace = data.total <= 400 ? '' : (names.includes('default') ? 'default' : (names[0] || ''));
    }
    if (ui.namespace && !names.includes(ui.namespace)) names.push(ui.namespace);
    names.sort();
    let html = '<option value="">(all namespaces)</option>';
    for (const name of names) {
      const n = data.namespaces.find((x) => x.name === name);
      html += '<option value="' + esc(name) + '">' + esc(name) + (n ? ' (' + n.count + ')' : '') + '</option>';
    }
    sel.innerHTML = html;
    sel.value = ui.namespace;
  }

  async function refresh() {
    if (ui.loading) return;
    ui.loading = true;
    try {
      await loadNamespaces();
      let url = GRAPH + '?format=json';
      const o = ui.object;
      if (ui.stuck) url += '&deletingFor=' + STUCK_AFTER_S + 's';
      else if (o) url += '&kind=' + encodeURIComponent(o.kind) + '&name=' + encodeURIComponent(o.name) + (o.namespace ? '&namespace=' + encodeURIComponent(o.namespace) : '');
      else if (ui.focus) url += '&uid=' + encodeURIComponent(ui.focus);
      else if (ui.namespace) url += '&namespace=' + encodeURIComponent(ui.namespace);
      let g;
      try {
        g = await getJSON(url);
      } catch (e) {
        if (o) { // no such object: show its namespace instead
          setBanner(e.message, true);
          ui.object = null;
          ui.loading = false;
          return refresh();
        }
        if (ui.focus) { // the focused object went away
          setBanner('The focused object is gone: ' + e.message, true);
          ui.focus = '';
          $('unfocus').hidden = true;
          syncURL();
          ui.loading = false;
          return refresh();
        }
        throw e;
      }
      if (o) {
        const m = g.nodes.find((n) => n.kind.toLowerCase() === o.kind.toLowerCase() && n.name === o.name && (n.namespace || '') === o.namespace);
        ui.object = null;
        if (m) { ui.focus = m.uid; ui.selected = m.uid; }
        syncURL();
      }
      ui.graph = g;
      setBanner(g.synced ? '' : 'kgc has not synced its informers yet: the graph may be incomplete.', false);
      render();
    } catch (e) {
      setBanner('Could not load the graph: ' + e.message, true);
    } finally {
      ui.loading = false;
    }
  }

  // ---- layout: owners above dependents, one block per connected component.
  function layout(nodes) {
    const byUID = new Map(nodes.map((n) => [n.uid, n]));
    for (const n of nodes) {
      const owners = new Set();
      for (const r of n.ownerReferences || []) if (byUID.has(r.uid) && r.uid !== n.uid) owners.add(r.uid);
      n._owners = [...owners];
      n._deps = [];
    }
    for (const n of nodes) for (const o of n._owners) byUID.get(o)._deps.push(n.uid);

    // Components.
    const comp = new Map();
    const comps = [];
    for (const n of nodes) {
      if (comp.has(n.uid)) continue;
      const members = [];
      const stack = [n.uid];
      comp.set(n.uid, comps.length);
      while (stack.length) {
        const u = stack.pop();
        const m = byUID.get(u);
        members.push(m);
        for (const v of m._owners.concat(m._deps)) {
          if (!comp.has(v)) { comp.set(v, comps.length); stack.push(v); }
        }
      }
      comps.push(members);
    }

    // Layers: longest path from the topmost owners (cycles broken).
    const layer = new Map();
    const visiting = new Set();
    function depth(n) {
      if (layer.has(n.uid)) return layer.get(n.uid);
      if (visiting.has(n.uid)) return 0;
      visiting.add(n.uid);
      let d = 0;
      for (const o of n._owners) d = Math.max(d, depth(byUID.get(o)) + 1);
      visiting.delete(n.uid);
      layer.set(n.uid, d);
      return d;
    }
    const byName = (a, b) => (a.kind + a.name).localeCompare(b.kind + b.name) || (a.uid < b.uid ? -1 : 1);

    const blocks = comps.map((members) => {
      const layers = [];
      for (const n of members) {
        const d = depth(n);
        (layers[d] = layers[d] || []).push(n);
      }
      for (const l of layers) if (l) l.sort(byName);
      const rows = layers.filter(Boolean);
      const pos = new Map();
      const index = () => rows.forEach((row) => row.forEach((n, i) => pos.set(n.uid, (i + 0.5) / row.length)));
      index();
      const bary = (n, nb) => {
        const xs = nb.filter((u) => pos.has(u)).map((u) => pos.get(u));
        return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : pos.get(n.uid);
      };
      for (let sweep = 0; sweep < 4; sweep++) {
        const down = sweep % 2 === 0;
        const order = down ? rows.slice(1) : rows.slice(0, -1).reverse();
        for (const row of order) {
          const key = new Map(row.map((n) => [n.uid, bary(n, down ? n._owners : n._deps)]));
          row.sort((a, b) => key.get(a.uid) - key.get(b.uid) || byName(a, b));
          row.forEach((n, i) => pos.set(n.uid, (i + 0.5) / row.length));
        }
      }
      const width = Math.max(...rows.map((r) => r.length)) * (W + HGAP) - HGAP;
      rows.forEach((row, d) => {
        const rw = row.length * (W + HGAP) - HGAP;
        const x0 = (width - rw) / 2;
        row.forEach((n, i) => { n._x = x0 + i * (W + HGAP); n._y = d * (H + VGAP); });
      });
      return { members, width, height: rows.length * (H + VGAP) - VGAP };
    });

    // Pack blocks in rows, largest first.
    blocks.sort((a, b) => b.members.length - a.members.length || byName(a.members[0], b.members[0]));
    const maxW = Math.max(900, ($('canvas').clientWidth || 1200) - 2 * PAD);
    let x = 0, y = 0, rowH = 0, totalW = 0;
    for (const b of blocks) {
      if (x > 0 && x + b.width > maxW) { x = 0; y += rowH + CGAP; rowH = 0; }
      for (const n of b.members) { n._x += x + PAD; n._y += y + PAD; }
      x += b.width + CGAP;
      rowH = Math.max(rowH, b.height);
      totalW = Math.max(totalW, x - CGAP);
    }
    return { byUID, width: totalW + 2 * PAD, height: y + rowH + 2 * PAD };
  }

  // capByComponent keeps whole connected components, up to max nodes,
  // preferring components where something is not simply live.
  function capByComponent(nodes, max) {
    const by = new Map(nodes.map((n) => [n.uid, n]));
    const seen = new Set();
    const comps = [];
    for (const n of nodes) {
      if (seen.has(n.uid)) continue;
      const comp = [];
      const stack = [n.uid];
      seen.add(n.uid);
      while (stack.length) {
        const m = by.get(stack.pop());
        comp.push(m);
        const next = (m.ownerReferences || []).map((r) => r.uid).concat(m.dependents || []);
        for (const u of next) if (by.has(u) && !seen.has(u)) { seen.add(u); stack.push(u); }
      }
      comp.interesting = comp.some((m) => m.state !== 'live');
      comps.push(comp);
    }
    comps.sort((a, b) => (b.interesting - a.interesting));
    const out = [];
    for (const c of comps) {
      if (out.length + c.length > max) continue;
      out.push(...c);
      if (out.length >= max) break;
    }
    return out.length ? out : comps[0].slice(0, max);
  }

  function near(uid) {
    const s = new Set([uid]);
    const n = ui.byUID.get(uid);
    if (n) { n._owners.forEach((u) => s.add(u)); n._deps.forEach((u) => s.add(u)); }
    return s;
  }

  function render() {
    const g = ui.graph;
    let nodes = g.nodes;
    let note = '';
    if (nodes.length > MAX_NODES) {
      nodes = capByComponent(nodes, MAX_NODES);
      note = ' (drawing ' + nodes.length + ', whole components, those with objects being deleted first; pick a namespace or focus an object)';
    }
    nodes = nodes.map((n) => Object.assign({}, n));
    const canvas = $('canvas');
    if (!nodes.length) {
      canvas.innerHTML = '<p class="empty">No objects here. Objects appear once kgc observes them; pick another namespace.</p>';
      ui.byUID = new Map();
    } else {
      const L = layout(nodes);
      ui.byUID = L.byUID;
      const hl = ui.selected && L.byUID.has(ui.selected) ? near(ui.selected) : null;
      let out = '<svg id="graph" width="' + L.width + '" height="' + L.height + '" viewBox="0 0 ' + L.width + ' ' + L.height + '"' +
        (hl ? ' class="selecting"' : '') + '>' +
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">' +
        '<path d="M0,0 L10,5 L0,10 z"></path></marker></defs><g class="edges">';
      for (const n of nodes) {
        const seen = new Set();
        for (const r of n.ownerReferences || []) {
          const o = L.byUID.get(r.uid);
          if (!o || seen.has(r.uid) || r.uid === n.uid) continue;
          seen.add(r.uid);
          const x1 = n._x + W / 2, y1 = n._y, x2 = o._x + W / 2, y2 = o._y + H + 2;
          const dy = Math.max(30, Math.abs(y1 - y2) / 2);
          let cls = 'edge';
          if (r.blockOwnerDeletion) cls += ' blocking';
          if (r.controller) cls += ' controller';
          if (r.blockOwnerDeletion && o.state === 'waitingForDependents') cls += ' stuck';
          if (hl && (r.uid === ui.selected || n.uid === ui.selected)) cls += ' near';
          out += '<path class="' + cls + '" marker-end="url(#arrow)" d="M' + x1 + ',' + y1 + ' C' + x1 + ',' + (y1 - dy) + ' ' + x2 + ',' + (y2 + dy) + ' ' + x2 + ',' + y2 + '">' +
            '<title>' + esc(label(n)) + ' → ' + esc(label(o)) + (r.blockOwnerDeletion ? ' (blockOwnerDeletion)' : '') + (r.controller ? ' (controller)' : '') + '</title></path>';
        }
      }
      out += '</g><g class="nodes">';
      for (const n of nodes) {
        let cls = 'node state-' + n.state;
        if (isStuck(n)) cls += ' stuck-node';
        if (n.uid === ui.selected) cls += ' selected';
        if (hl && hl.has(n.uid)) cls += ' near';
        const kindLine = n.kind + (n.namespace && n.namespace !== ui.namespace ? ' · ' + n.namespace : '') + (n.namespace ? '' : ' · cluster');
        out += '<g class="' + cls + '" data-uid="' + esc(n.uid) + '" data-name="' + esc(n.name) + '" data-state="' + esc(n.state) + '" transform="translate(' + n._x + ',' + n._y + ')">' +
          '<title>' + esc(label(n)) + ' — ' + esc(STATES[n.state] ? STATES[n.state][0] : n.state) + '</title>' +
          '<rect class="box" width="' + W + '" height="' + H + '" rx="7"></rect>' +
          '<rect class="bar" x="0" y="6" width="5" height="' + (H - 12) + '" rx="2"></rect>' +
          '<text class="kind" x="14" y="19">' + esc(trunc(kindLine, 26)) + '</text>' +
          '<text class="name" x="14" y="38">' + esc(trunc(n.name, 24)) + '</text>' +
          (BADGE[n.state] ? '<text class="badge" x="' + (W - 8) + '" y="19" text-anchor="end">' + esc(BADGE[n.state]) + '</text>' : '') +
          '</g>';
      }
      out += '</g></svg>';
      canvas.innerHTML = out;
    }
    const where = ui.stuck ? 'objects deleting for over ' + (STUCK_AFTER_S / 60) + ' minutes and what they wait for' : ui.focus ? 'component of ' + (ui.byUID.has(ui.focus) ? label(ui.byUID.get(ui.focus)) : ui.focus)
      : ui.namespace ? 'namespace ' + ui.namespace + ' and its direct owners/dependents' : 'all namespaces';
    setStatus(g.nodes.length + ' of ' + g.total + ' objects · ' + where + note + ' · updated ' + new Date().toLocaleTimeString());
    $('unfocus').hidden = !ui.focus;
    applySearch(false);
    showDetails();
  }

  // isStuck: deleting for longer than the stuck filter's threshold.
  function isStuck(n) {
    return !!n.deletionTimestamp && Date.now() - Date.parse(n.deletionTimestamp) > STUCK_AFTER_S * 1000;
  }

  // ---- search
  function applySearch(jump) {
    const q = $('search').value.trim().toLowerCase();
    const svg = $('graph');
    let hits = [];
    document.querySelectorAll('.node').forEach((el) => {
      const m = q !== '' && el.dataset.name.toLowerCase().includes(q);
      el.classList.toggle('match', m);
      if (m) hits.push(el);
    });
    if (svg) svg.classList.toggle('searching', q !== '');
    $('matches').textContent = q ? hits.length + (hits.length === 1 ? ' match' : ' matches') : '';
    if (jump && !hits.length && q && ui.graph) {
      // Not drawn (the view was capped): focus on the object's component.
      const n = ui.graph.nodes.find((x) => x.name.toLowerCase() === q) || ui.graph.nodes.find((x) => x.name.toLowerCase().includes(q));
      if (n) { focus(n.uid); return; }
    }
    if (jump && hits.length) {
      // Prefer an exact name match.
      const exact = hits.find((el) => el.dataset.name.toLowerCase() === q) || hits[0];
      select(exact.dataset.uid);
      const el = document.querySelector('.node[data-uid="' + CSS.escape(exact.dataset.uid) + '"]');
      if (el) el.scrollIntoView({ block: 'center', inline: 'center' });
    }
  }

  function select(uid) {
    ui.selected = uid;
    syncURL();
    render();
  }

  function focus(uid) {
    ui.focus = uid;
    ui.selected = uid;
    syncURL();
    refresh();
  }

  // ---- details
  function showDetails() {
    const d = $('details');
    const n = ui.selected && ui.byUID.get(ui.selected);
    if (!n) {
      d.innerHTML = '<p class="muted">Click an object to see its finalizers, owner references and dependents.</p>';
      return;
    }
    const st = STATES[n.state] || [n.state, ''];
    let h = '<div id="detail-title"><strong>' + esc(n.kind) + '</strong> ' + esc(n.name) + '</div>' +
      '<p><span class="pill ' + esc(n.state) + '">' + esc(st[0]) + '</span> <span class="muted small">' + esc(st[1]) + '</span></p>' +
      '<dl><dt>apiVersion</dt><dd>' + esc(n.apiVersion) + '</dd>' +
      '<dt>namespace</dt><dd>' + (n.namespace ? esc(n.namespace) : '<span class="muted">(cluster-scoped)</span>') + '</dd>' +
      '<dt>uid</dt><dd><code>' + esc(n.uid) + '</code></dd>' +
      (n.deletionTimestamp ? '<dt>deleting since</dt><dd>' + esc(n.deletionTimestamp) + (isStuck(n) ? ' <span class="pill stuck">stuck</span>' : '') + '</dd>' : '') + '</dl>';
    h += '<h3>Finalizers</h3>';
    h += (n.finalizers && n.finalizers.length)
      ? '<ul id="detail-finalizers">' + n.finalizers.map((f) => '<li><code>' + esc(f) + '</code></li>').join('') + '</ul>'
      : '<p class="muted">' + (n.state === 'placeholder' || n.state === 'absent' ? 'not observed' : 'none') + '</p>';
    h += '<h3>Owner references</h3>';
    const refs = n.ownerReferences || [];
    if (!refs.length) h += '<p class="muted">none</p>';
    else {
      h += '<ul id="detail-owners">';
      for (const r of refs) {
        const o = ui.byUID.get(r.uid);
        h += '<li>' + (o ? '<a data-uid="' + esc(r.uid) + '">' : '') + esc(r.kind + ' ' + r.name) + (o ? '</a>' : '') +
          (o ? ' <span class="pill ' + esc(o.state) + '">' + esc(STATES[o.state] ? STATES[o.state][0] : o.state) + '</span>' : '') +
          (r.controller ? ' <span class="pill flag">controller</span>' : '') +
          (r.blockOwnerDeletion ? ' <span class="pill flag">blockOwnerDeletion</span>' : '') +
          '<div class="muted small">' + esc(r.apiVersion) + ' · uid ' + esc(r.uid) + '</div></li>';
      }
      h += '</ul>';
    }
    h += '<h3>Dependents</h3>';
    const deps = n.dependents || [];
    if (!deps.length) h += '<p class="muted">none</p>';
    else {
      h += '<ul id="detail-dependents">';
      for (const u of deps) {
        const m = ui.byUID.get(u);
        h += '<li>' + (m ? '<a data-uid="' + esc(u) + '">' + esc(m.kind + ' ' + m.name) + '</a> <span class="pill ' + esc(m.state) + '">' + esc(STATES[m.state] ? STATES[m.state][0] : m.state) + '</span>' : '<code>' + esc(u) + '</code>') + '</li>';
      }
      h += '</ul>';
    }
    if (ui.focus !== n.uid) h += '<button id="focus" type="button" data-uid="' + esc(n.uid) + '">Focus on its component</button>';
    d.innerHTML = h;
  }

  // ---- wiring
  const STATE_ORDER = ['live', 'deleting', 'waitingForDependents', 'orphaning', 'placeholder', 'absent'];
  $('legend').innerHTML = STATE_ORDER.map((s) => '<li title="' + esc(STATES[s][1]) + '"><span class="swatch sw-' + s + '"></span>' + esc(STATES[s][0]) + '</li>').join('');

  $('canvas').addEventListener('click', (e) => {
    const el = e.target.closest('.node');
    if (el) select(el.dataset.uid === ui.selected ? '' : el.dataset.uid);
    else if (ui.selected) select('');
  });
  $('canvas').addEventListener('dblclick', (e) => {
    const el = e.target.closest('.node');
    if (el) focus(el.dataset.uid);
  });
  $('details').addEventListener('click', (e) => {
    const a = e.target.closest('a[data-uid]');
    if (a) { select(a.dataset.uid); return; }
    const b = e.target.closest('#focus');
    if (b) focus(b.dataset.uid);
  });
  $('namespace').addEventListener('change', (e) => {
    ui.namespace = e.target.value;
    ui.focus = '';
    ui.selected = '';
    syncURL();
    refresh();
  });
  $('unfocus').addEventListener('click', () => { ui.focus = ''; syncURL(); refresh(); });
  $('search').addEventListener('input', () => applySearch(false));
  $('search').addEventListener('keydown', (e) => { if (e.key === 'Enter') applySearch(true); });
  $('refresh').addEventListener('click', refresh);
  function schedule() {
    clearInterval(ui.timer);
    ui.timer = $('auto').checked ? setInterval(refresh, REFRESH_MS) : null;
  }
  $('auto').addEventListener('change', schedule);
  $('stuck').checked = ui.stuck;
  $('stuck').addEventListener('change', (e) => {
    ui.stuck = e.target.checked;
    ui.focus = '';
    ui.selected = '';
    syncURL();
    refresh();
  });
  schedule();
  refresh();
})();
