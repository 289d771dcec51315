package perfdata

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// zrecords lays records out as perf record -z does: the ones in each
// chunk into one zstd stream, flushed at the end of the chunk and cut
// there into COMPRESSED (or COMPRESSED2) records of at most max bytes of
// data; between chunks the uncompressed ones given.
func zrecords(t testing.TB, chunks [][]byte, between [][][]byte, max int, v2 bool) [][]byte {
	t.Helper()
	var stream bytes.Buffer
	enc, err := zstd.NewWriter(&stream, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for i, c := range chunks {
		enc.Write(c)
		if err := enc.Flush(); err != nil {
			t.Fatal(err)
		}
		data := stream.Bytes()
		for len(data) > 0 {
			n := min(len(data), max)
			if v2 {
				body := binary.LittleEndian.AppendUint64(nil, uint64(n))
				body = append(body, data[:n]...)
				body = append(body, make([]byte, (8-len(body)%8)%8)...)
				out = append(out, userRecord(TypeCompressed2, body))
			} else {
				out = append(out, userRecord(TypeCompressed, data[:n]))
			}
			data = data[n:]
		}
		stream.Reset()
		if i < len(between) {
			out = append(out, between[i]...)
		}
	}
	return out
}

// perf record -z's records read back in the file's order: the uncompressed
// ones at the start and between the compressed, those the compressed ones
// hold in between, a record split across two compressed records (a ring's
// wrap), a chunk cut into several records; COMPRESSED and COMPRESSED2.
func TestCompressedRecords(t *testing.T) {
	var all [][]byte
	for i := range 300 {
		all = append(all, sample(10+uint64(i%2), uint64(1000+i), uint64(0x1000*i)))
	}
	cat := func(rs [][]byte) []byte { return bytes.Join(rs, nil) }
	first := cat(all[:100])
	// The second pass's data ends inside record 150: the rest of it
	// comes with the third, as a wrapped ring's second half does.
	second := cat(all[100:151])
	second = second[:len(second)-13]
	third := append(all[150][len(all[150])-13:], cat(all[151:])...)
	rounds := [][][]byte{{finishedRound()}, {finishedRound(), userRecord(TypeFinishedRound, nil)}}
	for _, v2 := range []bool{false, true} {
		for _, max := range []int{1 << 15, 97} {
			recs := append([][]byte{sample(20, 1, 0)}, zrecords(t, [][]byte{first, second, third}, rounds, max, v2)...)
			f, err := Open(bytes.NewReader(buildFile(recs...)))
			if err != nil {
				t.Fatal(err)
			}
			var got [][]byte
			for {
				rec, err := f.Next()
				if err != nil {
					if err.Error() != "EOF" {
						t.Fatalf("v2 %v, max %d: after %d records: %v", v2, max, len(got), err)
					}
					break
				}
				got = append(got, append([]byte(nil), rec...))
			}
			// perf writes its rounds at record boundaries of the stream;
			// the ones here, inside record 150, come out before it.
			want := slices.Concat([][]byte{sample(20, 1, 0)}, all[:100], rounds[0], all[100:150], rounds[1], all[150:])
			if len(got) != len(want) {
				t.Fatalf("v2 %v, max %d: %d records, want %d", v2, max, len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("v2 %v, max %d: record %d is %x, want %x", v2, max, i, got[i], want[i])
				}
			}
			// At the end the decoder has gone, and the end stays.
			if _, err := f.z.dec.Read(make([]byte, 1)); !errors.Is(err, zstd.ErrDecoderClosed) {
				t.Errorf("v2 %v, max %d: the decoder after the last record: %v, want it closed", v2, max, err)
			}
			if _, err := f.Next(); !errors.Is(err, io.EOF) {
				t.Errorf("v2 %v, max %d: Next after the end: %v, want EOF", v2, max, err)
			}
		}
	}
	// A reader that stops early closes the file, and the decoder goes.
	f, err := Open(bytes.NewReader(buildFile(zrecords(t, [][]byte{first}, nil, 97, false)...)))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := f.Next(); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if _, err := f.z.dec.Read(make([]byte, 1)); !errors.Is(err, zstd.ErrDecoderClosed) {
		t.Errorf("the decoder after Close: %v, want it closed", err)
	}
	if _, err := f.Next(); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", err)
	}
}
