#!/usr/bin/env python3
"""Writes crates/ccm-runtime/src/client/protobuf/schema.rs: the protobuf field numbers of
the Kubernetes types the CCM reads or writes in protobuf, with each field's JSON name and
what Go's `encoding/json` does with it, read from the Go types themselves (their `json` and
`protobuf` struct tags), so a protobuf object decodes to exactly the fields its JSON would
have.

  tools/protobuf-schema/generate.py API_DIR APIMACHINERY_DIR > crates/ccm-runtime/src/client/protobuf/schema.rs

API_DIR and APIMACHINERY_DIR are checkouts of k8s.io/api and k8s.io/apimachinery (the
newest: a field the types know and the schema does not would be lost, a field the schema
knows and the types do not is ignored, as in JSON).
"""
import os, re, subprocess, sys

API, MACHINERY = sys.argv[1], sys.argv[2]
# Go package alias -> (checkout, directory) of the files that define its types.
PACKAGES = {
    'corev1': (API, 'core/v1'),
    'metav1': (MACHINERY, 'pkg/apis/meta/v1'),
}
ROOTS = [('corev1', 'Node'), ('corev1', 'Service'),
         ('corev1', 'Event'), ('metav1', 'Status')]
# Types whose protobuf form is not a plain message of their Go fields.
SPECIAL = {('metav1', 'Time'): 'Time', ('metav1', 'MicroTime'): 'MicroTime',
           ('resource', 'Quantity'): 'Quantity', ('intstr', 'IntOrString'): 'IntOrString',
           ('metav1', 'FieldsV1'): 'FieldsV1'}
IMPORTS = {'metav1': 'metav1', 'resource': 'resource', 'intstr': 'intstr', 'runtime': 'runtime',
           'types': 'types'}

def read_go(root, d):
    src = ''
    for name in sorted(os.listdir(os.path.join(root, d))):
        if name.endswith('.go') and not name.endswith('_test.go') and not name.startswith('zz_generated') \
                and name not in ('generated.pb.go',):
            src += open(os.path.join(root, d, name)).read() + '\n'
    return src

structs, named = {}, {}  # (pkg, name) -> [fields]; (pkg, name) -> underlying Go type
for pkg, (root, d) in PACKAGES.items():
    src = read_go(root, d)
    for m in re.finditer(r'^type (\w+) struct \{\n(.*?)^\}', src, re.S | re.M):
        fields = []
        for line in m.group(2).split('\n'):
            line = line.strip()
            # `Name Type `tags`` or an embedded `Type `tags``
            t = re.match(r'(?:(\w+)\s+)?([\w\.\*\[\]]+)\s+`(.*)`', line)
            if not t: continue
            tags = dict(re.findall(r'(\w+):"([^"]*)"', t.group(3)))
            if 'protobuf' not in tags or 'json' not in tags: continue
            fields.append((t.group(1) or t.group(2), t.group(2), tags['json'], tags['protobuf']))
        structs[(pkg, m.group(1))] = fields
    for m in re.finditer(r'^type (\w+) ([\w\.\[\]]+)\s*$', src, re.M):
        named[(pkg, m.group(1))] = m.group(2)

out, done, queue = [], set(), list(ROOTS)

def const(pkg, name):
    snake = re.sub(r'(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])', '_', name).upper()
    return snake if pkg == 'corev1' else 'META_' + snake

def kind(pkg, go):
    """The schema kind of Go type `go` as written in package `pkg`; queues messages."""
    if go.startswith('*'): return kind(pkg, go[1:])
    if go.startswith('[]'): return kind(pkg, go[2:])  # repeated: said by the field
    if go.startswith('map['):
        key, value = re.match(r'map\[([\w\.]+)\](.+)', go).groups()
        assert kind(pkg, key) == 'Kind::String', go
        return f'Kind::Map(&{kind(pkg, value)})'
    if '.' in go: p, n = go.split('.'); p = IMPORTS.get(p, p)
    else: p, n = pkg, go
    if (p, n) in SPECIAL: return f'Kind::{SPECIAL[(p, n)]}'
    if go in ('string',): return 'Kind::String'
    if go == 'bool': return 'Kind::Bool'
    if go in ('int32', 'int', 'uint32'): return 'Kind::Int32'
    if go in ('int64', 'uint64'): return 'Kind::Int64'
    if go == 'float64': return 'Kind::Double'
    if (p, n) in named: return kind(p, named[(p, n)])
    if (p, n) in structs:
        if (p, n) not in done: done.add((p, n)); queue.append((p, n))
        return f'Kind::Message(&{const(p, n)})'
    if p == 'types' and n == 'UID': return 'Kind::String'
    raise SystemExit(f'generate.py: no rule for Go type {go} in {pkg}')

def underlying(pkg, go):
    """`go` with named non-struct types replaced by what they name (`ResourceList` is a map,
    `NodePhase` a string, `types.UID` a string)."""
    ptr = '*' if go.startswith('*') else ''
    go = go.lstrip('*')
    if go == 'types.UID': return ptr + 'string'
    p, n = go.split('.') if '.' in go else (pkg, go)
    p = IMPORTS.get(p, p)
    if (p, n) in named and (p, n) not in SPECIAL: return ptr + underlying(p, named[(p, n)])
    return ptr + go

def zero_omitted(go, jsontag):
    """Go's encoding/json leaves the field out when it holds its zero value: `omitempty` on a
    type that is not a pointer and not a struct (for which omitempty does nothing)."""
    if 'omitempty' not in jsontag.split(',')[1:] or go.startswith('*'): return False
    return go.startswith('[]') or go.startswith('map[') or go in ('string', 'bool', 'int32', 'int64', 'int')

for p, n in ROOTS: done.add((p, n))
bodies = {}
while queue:
    p, n = queue.pop(0)
    rows = []
    for name, go, jsontag, pbtag in structs[(p, n)]:
        parts = pbtag.split(',')
        number = int(parts[1])
        resolved = underlying(p, go)
        # Repeated by the Go type, not the tag (gogo tags some pointers `rep`); a map's
        # entries repeat too, which its kind says.
        repeated = resolved.startswith('[]') and resolved != '[]byte'
        jname = jsontag.split(',')[0]
        rows.append(f'    Field {{ number: {number}, json: "{jname}", kind: {kind(p, go)}, '
                    f'repeated: {str(repeated).lower()}, zero_omitted: {str(zero_omitted(resolved, jsontag)).lower()} }},')
    bodies[(p, n)] = rows

api_rev = subprocess.run(['git', '-C', API, 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()
mach_rev = subprocess.run(['git', '-C', MACHINERY, 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()
print('// @generated by tools/protobuf-schema/generate.py from k8s.io/api', api_rev or '(no git)')
print('// and k8s.io/apimachinery', mach_rev or '(no git)', '- do not edit.')
print('//! The protobuf form of the Kubernetes types the CCM reads and writes in protobuf.')
print()
print('use super::schema_types::{Field, Kind, Message};')
for (p, n) in sorted(bodies):
    go_pkg = 'k8s.io/api/core/v1' if p == 'corev1' else 'k8s.io/apimachinery/pkg/apis/meta/v1'
    print()
    print(f'/// `{n}` of `{go_pkg}`.')
    print(f'pub(crate) static {const(p, n)}: Message = Message {{')
    print(f'    name: "{n}",')
    print('    fields: &[')
    for r in bodies[(p, n)]: print('    ' + r)
    print('    ],')
    print('};')
