package graph

import (
	"encoding/hex"

	"k8s.io/apimachinery/pkg/types"
)

// key is a node's UID in 16 bytes. The apiserver gives every object a
// random (version 4) UUID, whose canonical text is 36 bytes in a 48-byte
// allocation, plus a 16-byte string header wherever it is held; the graph
// holds the 128 bits instead, and spells the UID again only for readers.
//
// UIDs are opaque strings to Kubernetes, though, and tests (and other API
// servers) use others. A UID that is not a canonical lower-case UUID with a
// version nibble other than 0 gets a synthetic key with hi == 0 (so, version
// nibble 0: no parsed UUID has it), remembered in Graph.odd and Graph.oddUIDs
// while its node exists.
type key struct{ hi, lo uint64 }

// parseUUID parses a canonical lower-case UUID whose version nibble is not 0.
func parseUUID(s types.UID) (key, bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' || s[14] == '0' {
		return key{}, false
	}
	var b [16]byte
	j := 0
	for i := 0; i < 36; i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i--
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return key{}, false
		}
		b[j] = hi<<4 | lo
		j++
	}
	var k key
	for i := range 8 {
		k.hi = k.hi<<8 | uint64(b[i])
		k.lo = k.lo<<8 | uint64(b[8+i])
	}
	return k, true
}

// unhex decodes one lower-case hex digit.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// uuidString spells a parsed key as its canonical UUID.
func uuidString(k key) types.UID {
	var b [16]byte
	for i := range 8 {
		b[i] = byte(k.hi >> (56 - 8*i))
		b[8+i] = byte(k.lo >> (56 - 8*i))
	}
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return types.UID(s[:])
}

// lookup returns the key of uid if the graph may hold a node for it.
// Caller holds mu.
func (g *Graph) lookup(uid types.UID) (key, bool) {
	if k, ok := parseUUID(uid); ok {
		return k, true
	}
	k, ok := g.odd[uid]
	return k, ok
}

// keyFor returns the key of uid, assigning a synthetic one to a UID that is
// not a UUID. Caller holds mu for writing, and must create a node for a
// newly assigned key before releasing it (release forgets a key whose node
// goes).
func (g *Graph) keyFor(uid types.UID) key {
	if k, ok := parseUUID(uid); ok {
		return k
	}
	if k, ok := g.odd[uid]; ok {
		return k
	}
	g.nextOdd++
	k := key{lo: g.nextOdd}
	g.odd[uid] = k
	g.oddUIDs[k] = uid
	return k
}

// uidOf spells a key as its UID.
func (g *Graph) uidOf(k key) types.UID {
	if k.hi == 0 {
		if uid, ok := g.oddUIDs[k]; ok {
			return uid
		}
	}
	return uuidString(k)
}

// release removes the node with key k and forgets a synthetic key.
// Caller holds mu for writing.
func (g *Graph) release(k key) {
	delete(g.nodes, k)
	delete(g.deleting, k)
	delete(g.oddRVs, k)
	if k.hi == 0 {
		if uid, ok := g.oddUIDs[k]; ok {
			delete(g.oddUIDs, k)
			delete(g.odd, uid)
		}
	}
}

// node returns the node for uid, or nil. Caller holds mu.
func (g *Graph) node(uid types.UID) *node {
	if k, ok := g.lookup(uid); ok {
		return g.nodes[k]
	}
	return nil
}
