// goprobe: PUB -> OK latency with a Go client, for scripts/bench-matrix's
// pingpong row. Standard library only; it speaks the V2 wire itself: the
// "  V2" magic, then `PUB <topic>\n[4-byte size][body]` one at a time, each
// answered by a frame [4-byte size][4-byte type][data] (type 0 "OK"; a
// "_heartbeat_" response is answered with NOP). No IDENTIFY (optional).
//
// Prints one line: "goprobe: N PUBs - p50: X.XXXus - p99: Y.YYYus".
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sort"
	"time"
)

func main() {
	addr := flag.String("nsqd-tcp-address", "127.0.0.1:4150", "<addr>:<port> of nsqd")
	topic := flag.String("topic", "goprobe", "topic to PUB to")
	size := flag.Int("size", 200, "message size (bytes)")
	n := flag.Int("n", 10000, "most PUBs")
	runfor := flag.Duration("runfor", 0, "stop after this long (0: after -n PUBs)")
	flag.Parse()

	conn, err := net.DialTimeout("tcp", *addr, time.Second)
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("  V2")); err != nil {
		fail(err)
	}
	cmd := []byte("PUB " + *topic + "\n")
	cmd = binary.BigEndian.AppendUint32(cmd, uint32(*size))
	cmd = append(cmd, make([]byte, *size)...)

	samples := make([]time.Duration, 0, *n)
	start := time.Now()
	for i := 0; i < *n; i++ {
		t0 := time.Now()
		if _, err := conn.Write(cmd); err != nil {
			fail(err)
		}
		if err := readOK(conn, r); err != nil {
			fail(err)
		}
		samples = append(samples, time.Since(t0))
		if *runfor > 0 && time.Since(start) >= *runfor {
			break
		}
	}
	sort.Slice(samples, func(a, b int) bool { return samples[a] < samples[b] })
	fmt.Printf("goprobe: %d PUBs - p50: %.3fus - p99: %.3fus\n", len(samples),
		us(rank(samples, 0.50)), us(rank(samples, 0.99)))
}

// readOK reads frames up to the PUB's response, answering heartbeats.
func readOK(conn net.Conn, r *bufio.Reader) error {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		size := binary.BigEndian.Uint32(hdr[:4])
		kind := binary.BigEndian.Uint32(hdr[4:])
		if size < 4 {
			return fmt.Errorf("invalid frame size %d", size)
		}
		data := make([]byte, size-4)
		if _, err := io.ReadFull(r, data); err != nil {
			return err
		}
		switch {
		case kind == 0 && string(data) == "_heartbeat_":
			if _, err := conn.Write([]byte("NOP\n")); err != nil {
				return err
			}
		case kind == 0:
			return nil
		default:
			return fmt.Errorf("nsqd answered %q", data)
		}
	}
}

// rank is the q quantile, nearest rank (as nsq bench latency reports it).
func rank(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return sorted[i]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "goprobe:", err)
	os.Exit(1)
}
