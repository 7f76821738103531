// Package transfer streams a list of files from one directory tree to another
// over a byte stream (normally a TCP connection between two agents), with a
// bounded read-ahead buffer between reading and sending, a rate limiter on
// each stage, and a CRC-32C checksum of every file verified by the receiver.
//
// It knows nothing about PostgreSQL: package snapshot decides which files to
// send and what the end-of-stream documents (backup_label) are.
//
// # Stages
//
// Send runs two stages joined by a queue of fixed-size chunk buffers:
//
//	files ──reader──▶ [read-ahead buffer ≤ SendOptions.ReadAhead bytes] ──sender──▶ io.Writer
//	        ▲ SendOptions.Prefetch                                       ▲ SendOptions.Limiter
//
// The reader reads while the disk is calm and the buffer has room; the sender
// drains the buffer at the rate the controller allows. Slowing the sender (or
// pausing it, rate 0) fills the buffer and then stops the reader; slowing the
// reader (prefetch rate) lets the sender continue from memory until the buffer
// is empty. This is the migration buffering of the thesis
// (shared/papers/migration-buffering-thesis-excerpt.txt); the memory cap is
// a hard bound: the reader blocks when every chunk buffer is in use.
//
// Receive also runs two stages: one goroutine decodes frames from the
// network into a fixed set of payload buffers and checksums them, the other
// checks and writes them to disk, so reading the network overlaps writing
// files. Creating the files is a third: Send announces every file at the
// start of the stream ('L' frames) and the receiver creates them on a
// background worker while data flows, so the writing stage only opens a
// file that already exists (creating a file can cost milliseconds, see
// prepare.go). Neither side
// allocates per chunk once it is running: on the shared test VM fresh memory
// costs about 4 ms per MiB in page faults, which made a per-chunk allocation
// the largest cost of an unthrottled copy.
//
// # Files that change while they are read
//
// The stream is designed for hot copies, where files change underneath:
//   - a file that vanishes between listing and opening is skipped: nothing of
//     it is sent except a "skipped" record, and SendStats.Skipped names it;
//   - a file is read up to the size it had when it was opened; data appended
//     later is not sent;
//   - a file that shrinks while it is read is sent as read: the length is not
//     fixed in advance (the header carries only a size hint) — data follows in
//     chunks and the file's trailer carries the length actually sent and its
//     checksum.
//
// For a PostgreSQL data directory under pg_backup_start this yields a valid
// base backup: full_page_writes are forced during a backup, so the first change
// of every page after the backup's start is WAL-logged as a full page image;
// WAL replay from the backup's start point therefore overwrites any page that
// was torn (read half before, half after a write), re-extends files that were
// cut short, and truncates files that grew, exactly as for pg_basebackup.
//
// # Wire format (version 2)
//
// All integers are big-endian. The stream starts with the 8-byte magic
// "SLUICEXF" and a uint32 version, then a sequence of frames, each a one-byte
// type followed by its body:
//
//	'D' dir       u16 pathlen, path, u32 mode
//	'L' listed    u16 pathlen, path, u32 mode                 (announces a file)
//	'F' file      u16 pathlen, path, u32 mode, u64 size hint  (opens a file)
//	'C' chunk     u32 n (1..MaxChunkSize), n data bytes       (inside a file)
//	'T' trailer   u64 length, u32 crc32c                      (closes a file)
//	'S' skipped   u16 pathlen, path                           (vanished file)
//	'M' document  u16 namelen, name, u32 n (≤ MaxDocumentSize), data, u32 crc32c
//	'A' abort     u16 msglen, msg                             (sender failed; stream ends)
//	'Z' end       u64 files, u64 dirs, u64 bytes, u64 documents, u64 skipped
//
// An 'L' frame announces that a file with this path and mode follows
// later in the stream, as an 'F' frame with the same mode or, if it
// vanished, an 'S' frame; the receiver may create it at once. Send lists
// every file before its first other frame. A listed file that never comes is
// an error, as is a listed path that is also a directory or document.
// Version 1 is version 2 without 'L' frames; receivers accept both.
//
// Paths are slash-separated and relative; the receiver rejects absolute
// paths, "..", empty or unclean paths and duplicates, so a hostile stream
// cannot write outside the destination. A stream that ends before 'Z' is an
// error (a torn connection is never mistaken for a complete copy).
package transfer
