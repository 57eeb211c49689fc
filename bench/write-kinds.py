#!/usr/bin/env python3
"""What each kind of Node write costs the API server (issue 30).

Creates N tainted Nodes per kind, then writes each once, 8 at a time, as a cloud-node
controller initialises it (provider ID, six topology labels, the taint removed), and
prints the CPU time kube-apiserver and etcd spent per write:

  jsonpatch       JSON Patch guarded by a `test` of the taints (ours until issue 30)
  jsonpatch-meta  the same, answered with `as=PartialObjectMetadata` (ours since)
  merge           JSON merge patch guarded by `metadata.resourceVersion`
  put             PUT of the whole Node read before (Go's `Update`, in JSON here)

Run against a control plane of its own (nothing else may use it: all its CPU is counted):

  cargo run -p ccm-local-control-plane -- --kubeconfig /tmp/lcp.kubeconfig &
  python3 bench/write-kinds.py /tmp/lcp.kubeconfig 1000 [KIND...]

Needs PyYAML. kube-apiserver and etcd are found by process name.
"""
import base64, json, os, ssl, sys, tempfile, time, http.client, threading, yaml
from concurrent.futures import ThreadPoolExecutor
kc = yaml.safe_load(open(sys.argv[1]))
cl = kc['clusters'][0]['cluster']; us = kc['users'][0]['user']
host, port = cl['server'].replace('https://','').split(':')
d = tempfile.mkdtemp()
def w(n, b64):
    p = os.path.join(d, n); open(p,'wb').write(base64.b64decode(b64)); return p
ca = w('ca', cl['certificate-authority-data'])
ctx = ssl.create_default_context(cafile=ca)
if 'client-certificate-data' in us:
    ctx.load_cert_chain(w('c', us['client-certificate-data']), w('k', us['client-key-data']))
hdr = {}
if 'token' in us: hdr['Authorization'] = 'Bearer ' + us['token']
local = threading.local()
def req(method, path, body=None, ctype='application/json', accept='application/json'):
    c = getattr(local, 'c', None)
    if c is None:
        c = local.c = http.client.HTTPSConnection(host, int(port), context=ctx)
    h = dict(hdr); h['Content-Type'] = ctype; h['Accept'] = accept
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); data = r.read()
    if r.status >= 300: raise Exception(f'{method} {path}: {r.status} {data[:300]}')
    return json.loads(data) if data else None
def servers():
    found = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            if open(f'/proc/{pid}/comm').read().strip() in ('kube-apiserver', 'etcd'):
                found.append(int(pid))
        except OSError:
            pass
    if len(found) != 2:
        sys.exit(f'write-kinds.py: want one kube-apiserver and one etcd running, found pids {found}')
    return found
pids = servers()
def cpu():
    t = 0
    for p in pids:
        f = open(f'/proc/{p}/stat').read().rsplit(')',1)[1].split()
        t += int(f[11]) + int(f[12])
    return t / 100.0
TAINT = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}
LABELS = {f"{p}/{k}": "v" for p in ["node.kubernetes.io", "beta.kubernetes.io"] for k in ["instance-type", "zone", "region"]}
def node(name):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": [TAINT]}}
RUN = str(int(time.time()))
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
kinds = sys.argv[3:] or ['jsonpatch', 'jsonpatch-meta', 'merge', 'put']
pool = ThreadPoolExecutor(8)
for kind in kinds:
    names = [f'{kind}-{RUN}-{i}' for i in range(N)]
    list(pool.map(lambda n: req('POST', '/api/v1/nodes', node(n)), names))
    cached = {n: req('GET', f'/api/v1/nodes/{n}') for n in names}
    time.sleep(2)
    def one(n):
        cur = cached[n]
        if kind.startswith('jsonpatch'):
            ops = [{"op": "add", "path": "/spec/providerID", "value": "fake://" + n}]
            ops += [{"op": "add", "path": "/metadata/labels/" + k.replace('/', '~1'), "value": v} for k, v in LABELS.items()]
            ops += [{"op": "test", "path": "/spec/taints", "value": cur["spec"]["taints"]}, {"op": "remove", "path": "/spec/taints"}]
            acc = 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1' if kind == 'jsonpatch-meta' else 'application/json'
            req('PATCH', f'/api/v1/nodes/{n}?fieldManager=cloud-node-controller', ops, 'application/json-patch+json', acc)
        elif kind == 'merge':
            body = {"metadata": {"resourceVersion": cur['metadata']['resourceVersion'], "labels": LABELS},
                    "spec": {"providerID": "fake://" + n, "taints": None}}
            req('PATCH', f'/api/v1/nodes/{n}?fieldManager=cloud-node-controller', body, 'application/merge-patch+json')
        elif kind == 'put':
            new = json.loads(json.dumps(cur)); new['spec']['providerID'] = 'fake://' + n
            new['spec'].pop('taints', None); new['metadata']['labels'].update(LABELS)
            req('PUT', f'/api/v1/nodes/{n}', new)
    before = cpu(); t0 = time.time()
    list(pool.map(one, names))
    el = time.time() - t0; used = cpu() - before
    print(f'{kind:15s} {N} writes: {el:.2f} s wall, server+etcd CPU {1000*used/N:.2f} ms per write')
