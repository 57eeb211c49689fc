#!/usr/bin/env python3
"""What each kind of request costs the API server, in JSON and in protobuf (issues 30, 43).

Each kind runs on a set of Nodes of its own (created tainted, without addresses, as a
kubelet registers them under a cloud provider), 8 requests at a time, and prints the CPU
time kube-apiserver and etcd spent per request, less what they spend at rest:

  Node writes (a cloud-node controller's first write: provider ID, six topology labels,
  the taint removed), one per Node:
    jsonpatch          JSON Patch guarded by a `test` of the taints (ours until issue 30)
    jsonpatch-meta     the same, answered with `as=PartialObjectMetadata` (ours since)
    merge              JSON merge patch guarded by `metadata.resourceVersion`
    put                PUT of the whole Node read before, JSON (Go's `Update` in JSON)
    put-pb             the same PUT in protobuf (Go's `Update` as client-go sends it)
  Node status writes (the addresses), one per Node:
    status-jsonpatch-meta   JSON Patch of nodes/status guarded by a `test` of the old
                            addresses, metadata answer (ours with JSON Node writes)
    status-jsonpatch-pb     the same, the whole Node answered in protobuf (ours with
                            protobuf Node writes: the update is made from the answer)
    status-smp         strategic merge patch with `$setElementOrder` (Go's PatchNodeStatus)
    status-put-pb      PUT of nodes/status in protobuf
  Events, one per Node:
    event-json         create of a core/v1 Event in JSON (ours)
    event-pb           the same create in protobuf (Go's)
  Reads:
    list-json, list-pb 20 lists of all Nodes (the figure is per listed Node)
    watch:ENC,...      watches of all Nodes open in the given encodings (`json`, `pb`;
                       `watch:` for none) while each Node's label is patched 5 times (JSON
                       merge patch); the figure is per patch, so the cost of one more
                       watcher per Node event is the difference between two of them
                       (`watch:pb,json` − `watch:pb`: a JSON watcher beside a protobuf one)

Protobuf bodies are built the way client-go's are (the `k8s\\0` envelope around a
`runtime.Unknown`); objects are edited as protobuf wire data, field by field, so nothing
the server sent is dropped. No library beyond PyYAML.

Run against a control plane of its own (nothing else may use it: all its CPU is counted):

  cargo run -p ccm-local-control-plane -- --kubeconfig /tmp/lcp.kubeconfig &
  python3 bench/request-kinds.py /tmp/lcp.kubeconfig 1000 [KIND... | reversed]

kube-apiserver and etcd are found by process name.
"""
import base64, json, os, ssl, sys, tempfile, time, http.client, threading, yaml
from concurrent.futures import ThreadPoolExecutor

kc = yaml.safe_load(open(sys.argv[1]))
cl = kc['clusters'][0]['cluster']; us = kc['users'][0]['user']
host, port = cl['server'].replace('https://', '').split(':')
d = tempfile.mkdtemp()
def w(n, b64):
    p = os.path.join(d, n); open(p, 'wb').write(base64.b64decode(b64)); return p
ca = w('ca', cl['certificate-authority-data'])
ctx = ssl.create_default_context(cafile=ca)
if 'client-certificate-data' in us:
    ctx.load_cert_chain(w('c', us['client-certificate-data']), w('k', us['client-key-data']))
hdr = {}
if 'token' in us: hdr['Authorization'] = 'Bearer ' + us['token']
JSON = 'application/json'
PB = 'application/vnd.kubernetes.protobuf'
META = 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1'
local = threading.local()
def connect():
    return http.client.HTTPSConnection(host, int(port), context=ctx)
def req(method, path, body=None, ctype=JSON, accept=JSON):
    c = getattr(local, 'c', None)
    if c is None:
        c = local.c = connect()
    h = dict(hdr); h['Content-Type'] = ctype; h['Accept'] = accept
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse(); data = r.read()
    if r.status >= 300: raise Exception(f'{method} {path}: {r.status} {data[:300]}')
    if accept == PB: return data
    return json.loads(data) if data else None

# --- protobuf wire data, as much as editing an object needs --------------------------
MAGIC = b'k8s\x00'
def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7f; n >>= 7
        if n: out.append(b | 0x80)
        else: out.append(b); return bytes(out)
def read_varint(b, i):
    n = shift = 0
    while True:
        x = b[i]; i += 1; n |= (x & 0x7f) << shift; shift += 7
        if not x & 0x80: return n, i
def fields(msg):
    """(field number, whole field as bytes, payload of a length-delimited field or None)."""
    i = 0
    while i < len(msg):
        start = i; key, i = read_varint(msg, i); num, wt = key >> 3, key & 7
        payload = None
        if wt == 0: _, i = read_varint(msg, i)
        elif wt == 1: i += 8
        elif wt == 5: i += 4
        elif wt == 2:
            n, i = read_varint(msg, i); payload = msg[i:i + n]; i += n
        else: raise ValueError(f'wire type {wt}')
        yield num, msg[start:i], payload
def f(num, payload):
    """A length-delimited field (string, bytes, message)."""
    if isinstance(payload, str): payload = payload.encode()
    return varint(num << 3 | 2) + varint(len(payload)) + payload
def get(msg, num):
    return next((p for n, _, p in fields(msg) if n == num), b'')
def edit(msg, drop=(), add=b''):
    """`msg` without the fields numbered in `drop`, with `add` after: every other field kept
    as the server sent it, known to this script or not."""
    return b''.join(raw for n, raw, _ in fields(msg) if n not in drop) + add
def unwrap(data):
    assert data[:4] == MAGIC, data[:20]
    return get(data[4:], 2)  # runtime.Unknown.raw
def wrap(obj, api_version, kind):
    return MAGIC + f(1, f(1, api_version) + f(2, kind)) + f(2, obj)

# --- the server's CPU --------------------------------------------------------------
def servers():
    found = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            if open(f'/proc/{pid}/comm').read().strip() in ('kube-apiserver', 'etcd'):
                found.append(int(pid))
        except OSError:
            pass
    if len(found) != 2:
        sys.exit(f'request-kinds.py: want one kube-apiserver and one etcd running, found pids {found}')
    return found
pids = servers()
def cpu():
    t = 0
    for p in pids:
        s = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()
        t += int(s[11]) + int(s[12])
    return t / os.sysconf('SC_CLK_TCK')
def idle_rate(secs=5.0):
    c0 = cpu(); t0 = time.time(); time.sleep(secs)
    return (cpu() - c0) / (time.time() - t0)

TAINT = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}
LABELS = {f"{p}/{k}": "v" for p in ["node.kubernetes.io", "beta.kubernetes.io"] for k in ["instance-type", "zone", "region"]}
def node(name):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": [TAINT]}}
def addresses(i, n):
    return [{"type": "InternalIP", "address": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"}, {"type": "Hostname", "address": n}]
def event(n, uid):
    now = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{n}.{time.time_ns():x}", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": n, "uid": uid, "apiVersion": "v1"},
            "reason": "Synced", "message": "Node synced successfully", "type": "Normal",
            "source": {"component": "cloud-node-controller"}, "firstTimestamp": now, "lastTimestamp": now,
            "count": 1, "reportingComponent": "cloud-node-controller", "reportingInstance": ""}

RUN = str(int(time.time()))
WATCH_ROUNDS = 5  # patches per Node in the watch kinds: more events, less noise
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
ALL = ['jsonpatch-meta', 'put', 'put-pb', 'status-jsonpatch-meta', 'status-jsonpatch-pb', 'status-smp', 'status-put-pb',
       'event-json', 'event-pb', 'list-json', 'list-pb', 'watch:', 'watch:json', 'watch:pb', 'watch:pb,json', 'watch:pb,pb']
kinds = sys.argv[3:] or ALL
if kinds == ['reversed']:
    kinds = ALL[::-1]
pool = ThreadPoolExecutor(8)
rate = idle_rate()
print(f'# {N} Nodes per kind; kube-apiserver + etcd at rest: {1000 * rate:.1f} CPU ms/s, subtracted', flush=True)

def watcher(enc, stop, ready):
    c = connect()
    h = dict(hdr); h['Accept'] = PB if enc == 'pb' else JSON
    c.request('GET', '/api/v1/nodes?watch=1&allowWatchBookmarks=false&resourceVersion=0', headers=h)
    r = c.getresponse(); assert r.status == 200, r.status
    r.read1(65536); ready.release()
    while not stop.is_set():
        if not r.read1(65536): break
    c.close()

CHUNKS = 10  # each kind's requests in 10 chunks, the kinds taking turns: the server's drift
# (its garbage collector, etcd's compactions, the growing number of Nodes) falls on all alike

def prepare(kind):
    """Creates the kind's Nodes; returns what measuring it needs."""
    names = [f'{kind.replace(":", "-").replace(",", "-").rstrip("-")}-{RUN}-{i}' for i in range(N)]
    list(pool.map(lambda n: req('POST', '/api/v1/nodes', node(n)), names))
    cached = {n: req('GET', f'/api/v1/nodes/{n}') for n in names}
    pb = {n: unwrap(req('GET', f'/api/v1/nodes/{n}', accept=PB)) for n in names} if kind.endswith('-pb') else {}
    template = None
    if kind == 'event-pb':
        made = req('POST', '/api/v1/namespaces/default/events', event(names[0], cached[names[0]]['metadata']['uid']))
        template = unwrap(req('GET', f'/api/v1/namespaces/default/events/{made["metadata"]["name"]}', accept=PB))
    return {'names': names, 'cached': cached, 'pb': pb, 'index': {n: i for i, n in enumerate(names)},
            'template': template}

def one(kind, ctx, n):
    cur = ctx['cached'][n]; pb = ctx['pb']; index = ctx['index']; template = ctx['template']
    if kind.startswith('jsonpatch'):
        ops = [{"op": "add", "path": "/spec/providerID", "value": "fake://" + n}]
        ops += [{"op": "add", "path": "/metadata/labels/" + k.replace('/', '~1'), "value": v} for k, v in LABELS.items()]
        ops += [{"op": "test", "path": "/spec/taints", "value": cur["spec"]["taints"]}, {"op": "remove", "path": "/spec/taints"}]
        req('PATCH', f'/api/v1/nodes/{n}?fieldManager=cloud-node-controller', ops, 'application/json-patch+json',
            META if kind == 'jsonpatch-meta' else JSON)
    elif kind == 'merge':
        body = {"metadata": {"resourceVersion": cur['metadata']['resourceVersion'], "labels": LABELS},
                "spec": {"providerID": "fake://" + n, "taints": None}}
        req('PATCH', f'/api/v1/nodes/{n}?fieldManager=cloud-node-controller', body, 'application/merge-patch+json')
    elif kind == 'put':
        new = json.loads(json.dumps(cur)); new['spec']['providerID'] = 'fake://' + n
        new['spec'].pop('taints', None); new['metadata']['labels'].update(LABELS)
        req('PUT', f'/api/v1/nodes/{n}', new)
    elif kind == 'put-pb':
        obj = pb[n]
        meta = edit(get(obj, 1), add=b''.join(f(11, f(1, k) + f(2, v)) for k, v in LABELS.items()))
        spec = edit(get(obj, 2), drop={3, 5}, add=f(3, 'fake://' + n))
        req('PUT', f'/api/v1/nodes/{n}', wrap(edit(obj, drop={1, 2}, add=f(1, meta) + f(2, spec)), 'v1', 'Node'), PB, PB)
    elif kind.startswith('status-jsonpatch'):
        # ours: a Node without addresses yet gets them guarded by its resource version
        ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": cur['metadata']['resourceVersion']},
               {"op": "add", "path": "/status/addresses", "value": addresses(index[n], n)}]
        req('PATCH', f'/api/v1/nodes/{n}/status?fieldManager=cloud-node-controller', ops, 'application/json-patch+json',
            PB if kind.endswith('-pb') else META)
    elif kind == 'status-smp':
        a = addresses(index[n], n)
        body = {"status": {"$setElementOrder/addresses": [{"type": x["type"]} for x in a], "addresses": a}}
        req('PATCH', f'/api/v1/nodes/{n}/status', body, 'application/strategic-merge-patch+json')
    elif kind == 'status-put-pb':
        obj = pb[n]
        a = b''.join(f(5, f(1, x['type']) + f(2, x['address'])) for x in addresses(index[n], n))
        status = edit(get(obj, 3), drop={5}, add=a)
        req('PUT', f'/api/v1/nodes/{n}/status', wrap(edit(obj, drop={3}, add=f(3, status)), 'v1', 'Node'), PB, PB)
    elif kind == 'event-json':
        req('POST', '/api/v1/namespaces/default/events', event(n, cur['metadata']['uid']))
    elif kind == 'event-pb':
        meta = edit(get(template, 1), drop={1, 5, 6, 8, 17}, add=f(1, f'{n}.{time.time_ns():x}'))
        req('POST', '/api/v1/namespaces/default/events', wrap(edit(template, drop={1}, add=f(1, meta)), 'v1', 'Event'), PB, PB)
    elif kind.startswith('watch:'):
        for round in range(WATCH_ROUNDS):
            req('PATCH', f'/api/v1/nodes/{n}', {"metadata": {"labels": {"request-kinds": f"patched-{round}"}}},
                'application/merge-patch+json')
    else:
        raise SystemExit(f'request-kinds.py: no kind {kind}')

def measure(kind, ctx, chunk):
    """Server CPU seconds (less its rate at rest), requests (or Nodes listed), seconds."""
    stop = threading.Event(); threads = []
    if kind.startswith('watch:'):
        encs = [e for e in kind[6:].split(',') if e]
        ready = threading.Semaphore(0)
        threads = [threading.Thread(target=watcher, args=(e, stop, ready), daemon=True) for e in encs]
        for t in threads: t.start()
        for _ in threads: ready.acquire()
        time.sleep(1)  # the watch's first events (every Node) sent
    names = ctx['names'][chunk * N // CHUNKS:(chunk + 1) * N // CHUNKS]
    count = len(names) * WATCH_ROUNDS if kind.startswith('watch:') else len(names)
    if kind.startswith('list-'):
        count = 2 * len(req('GET', '/api/v1/nodes?resourceVersion=0')['items'])
    before = cpu(); t0 = time.time()
    if kind.startswith('list-'):
        for _ in range(2):
            req('GET', '/api/v1/nodes', accept=PB if kind == 'list-pb' else JSON)
    else:
        list(pool.map(lambda n: one(kind, ctx, n), names))
    if threads:
        time.sleep(0.5)  # the watchers' last events
    el = time.time() - t0; used = cpu() - before - rate * el
    stop.set()
    return used, count, el

contexts = {kind: prepare(kind) for kind in kinds}
time.sleep(2)
totals = {kind: [0.0, 0, 0.0] for kind in kinds}
for chunk in range(CHUNKS):
    order = kinds[chunk % len(kinds):] + kinds[:chunk % len(kinds)]
    for kind in order:
        used, count, el = measure(kind, contexts[kind], chunk)
        t = totals[kind]; t[0] += used; t[1] += count; t[2] += el
for kind in kinds:
    used, count, el = totals[kind]
    print(f'{kind:22s} {count:7d} requests (or Nodes listed): {el:6.2f} s wall, '
          f'server+etcd CPU {1000 * used / count:.3f} ms each', flush=True)
