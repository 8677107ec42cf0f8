package node

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// A claim journal: one generation of claim records (store.go), as an
// append-only log in one file. A group of writes is one pwrite and one
// fdatasync (a bbolt commit is two: its pages, then its meta page). The
// file is extended with zeros a chunk ahead of the records, so appends
// overwrite written blocks and their fdatasync flushes data, not the
// file's size or its extents (but once per chunk).
//
// Layout: a header (magic, a random salt, the generation, the header's
// CRC), then records back to back:
//
//	length u32 | crc u32 | op u8 ('P' put, 'D' delete) | key length u16 | key | value
//
// where length counts the bytes after crc, and crc is CRC-32C over
// length..value seeded with the previous record's crc (the first with the
// salt's): a chain. Replay reads records until the first one whose length
// or crc does not fit, which is where the last write ended, torn or not.
// A reset (a new generation) writes a new salt, so the records of earlier
// generations still in the file no longer chain and are never replayed.
//
// Like SQLite's WAL (its "powersafe overwrite") the journal assumes that a
// power loss during a write does not damage bytes of the same sector the
// write did not change: an append rewrites the partial sector holding the
// tail of the records already acknowledged, and the first sector holds the
// header too.

const (
	journalMagic = "HEARTHJ1"
	// journalHeaderSize is the header: magic, salt u64, generation u64,
	// crc u32, padding.
	journalHeaderSize = 32
	// journalChunk is the step, in zeros, by which the file is extended
	// ahead of its records.
	journalChunk = 1 << 20
	// journalMaxKey bounds a replayed key (a sandbox id).
	journalMaxKey = 1 << 10
	// journalMaxRecord bounds a replayed record.
	journalMaxRecord = 16 << 20
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// journalOp is one journaled write: put key = val, or delete key (val nil).
type journalOp struct {
	key, val []byte
}

// journal is the open journal file. It is used by one writer at a time
// (the store's group commit leader).
type journal struct {
	f      *os.File
	noSync bool
	salt   [8]byte
	gen    uint64 // the generation the file holds
	off    int64  // where the next record goes
	alloc  int64  // the file's size: zeros from the last record on
	crc    uint32 // the chain's last crc
	// syncFile makes the file's writes durable: fdatasync; tests replace
	// it to fail.
	syncFile func(*os.File) error
}

// openJournal opens (creating) the journal at path and
// returns it with the generation it holds (0: none) and that generation's
// operations, in order. Before appending, the caller resets it.
func openJournal(path string, noSync bool) (*journal, uint64, []journalOp, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, nil, err
	}
	j := &journal{f: f, noSync: noSync, syncFile: fdatasync}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, 0, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	gen, ops := replayJournal(data)
	j.alloc = int64(len(data))
	return j, gen, ops, nil
}

// replayJournal parses a journal file's bytes: its generation (0 when it
// has no valid header: new, or a reset that did not complete) and that
// generation's operations, up to the first record that does not chain.
func replayJournal(data []byte) (uint64, []journalOp) {
	if len(data) < journalHeaderSize || string(data[:8]) != journalMagic ||
		binary.LittleEndian.Uint32(data[24:28]) != crc32.Checksum(data[:24], crc32c) {
		return 0, nil
	}
	gen := binary.LittleEndian.Uint64(data[16:24])
	var ops []journalOp
	crc := crc32.Checksum(data[8:16], crc32c)
	for off := journalHeaderSize; len(data)-off >= 8; {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		if n < 3 || n > journalMaxRecord || n > len(data)-off-8 {
			break
		}
		body := data[off+8 : off+8+n]
		want := crc32.Update(crc32.Update(crc, crc32c, data[off:off+4]), crc32c, body)
		if binary.LittleEndian.Uint32(data[off+4:]) != want {
			break
		}
		op, kn := body[0], int(binary.LittleEndian.Uint16(body[1:3]))
		if (op != 'P' && op != 'D') || kn == 0 || kn > journalMaxKey || kn > n-3 || (op == 'D' && kn != n-3) {
			break
		}
		o := journalOp{key: body[3 : 3+kn]}
		if op == 'P' {
			o.val = body[3+kn:]
		}
		ops = append(ops, o)
		crc, off = want, off+8+n
	}
	return gen, ops
}

// encode appends ops as records chained from crc and returns the bytes and
// the chain's new last crc.
func encodeJournal(buf []byte, crc uint32, ops []journalOp) ([]byte, uint32) {
	for _, o := range ops {
		start := len(buf)
		n := 3 + len(o.key) + len(o.val)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(n))
		buf = append(buf, 0, 0, 0, 0) // crc, below
		op := byte('P')
		if o.val == nil {
			op = 'D'
		}
		buf = append(buf, op)
		buf = binary.LittleEndian.AppendUint16(buf, uint16(len(o.key)))
		buf = append(buf, o.key...)
		buf = append(buf, o.val...)
		crc = crc32.Update(crc32.Update(crc, crc32c, buf[start:start+4]), crc32c, buf[start+8:])
		binary.LittleEndian.PutUint32(buf[start+4:], crc)
	}
	return buf, crc
}

// checkOps refuses the operations a journal cannot hold.
func checkOps(ops []journalOp) error {
	for _, o := range ops {
		if len(o.key) == 0 || len(o.key) > journalMaxKey || 3+len(o.key)+len(o.val) > journalMaxRecord {
			return fmt.Errorf("a claim record of key %.40q and %d bytes does not fit the journal", o.key, len(o.val))
		}
	}
	return nil
}

// append writes ops at the journal's end and syncs them. On failure the
// journal's end does not move (what was written there is not chained to
// by the next append... until it is overwritten: the caller must reset
// the journal before appending again, see store.broken).
func (j *journal) append(ops []journalOp) error {
	buf, crc := encodeJournal(nil, j.crc, ops)
	if _, err := j.f.WriteAt(buf, j.off); err != nil {
		return fmt.Errorf("writing the claim journal: %w", err)
	}
	if err := j.extend(j.off + int64(len(buf))); err != nil {
		return err
	}
	if err := j.sync(); err != nil {
		return err
	}
	j.off += int64(len(buf))
	j.crc = crc
	return nil
}

// extend writes zeros from end to the next chunk boundary when the file
// ends before it (unsynced: the caller syncs).
func (j *journal) extend(end int64) error {
	if end < j.alloc {
		return nil
	}
	to := (end/journalChunk + 1) * journalChunk
	if _, err := j.f.WriteAt(make([]byte, to-end), end); err != nil {
		return fmt.Errorf("extending the claim journal: %w", err)
	}
	j.alloc = to
	return nil
}

// size is the bytes of records in the journal's generation.
func (j *journal) size() int64 { return j.off - journalHeaderSize }

// reset starts generation gen in the file, empty: a new salt in the
// header, synced, so no record written before is replayed. Call only once
// what the file held is checkpointed.
func (j *journal) reset(gen uint64) error {
	var salt [8]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return err
	}
	hdr := journalHeader(salt, gen)
	if _, err := j.f.WriteAt(hdr, 0); err != nil {
		return fmt.Errorf("resetting the claim journal: %w", err)
	}
	if err := j.extend(journalHeaderSize); err != nil {
		return err
	}
	if err := j.sync(); err != nil {
		return err
	}
	j.salt, j.gen = salt, gen
	j.off, j.crc = journalHeaderSize, crc32.Checksum(salt[:], crc32c)
	return nil
}

// journalHeader is the header of generation gen under salt.
func journalHeader(salt [8]byte, gen uint64) []byte {
	hdr := make([]byte, journalHeaderSize)
	copy(hdr, journalMagic)
	copy(hdr[8:16], salt[:])
	binary.LittleEndian.PutUint64(hdr[16:24], gen)
	binary.LittleEndian.PutUint32(hdr[24:28], crc32.Checksum(hdr[:24], crc32c))
	return hdr
}

func (j *journal) sync() error {
	if j.noSync {
		return nil
	}
	if err := j.syncFile(j.f); err != nil {
		return fmt.Errorf("syncing the claim journal: %w", err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }
