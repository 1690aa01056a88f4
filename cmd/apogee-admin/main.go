// Command apogee-admin administers Apogee brokers and their data.
//
// Online commands use mqadmin's names and flags (matched without regard to
// case), against a running cluster through its name server (-n/--namesrv or
// NAMESRV_ADDR): clusterList, topicList, topicRoute, topicStatus,
// updateTopic, deleteTopic, updateSubGroup, deleteSubGroup,
// consumerProgress, consumerConnection, producerConnection, consumerStatus,
// queryMsgById, queryMsgByKey, queryMsgByUniqueKey, queryMsgByOffset,
// resetOffsetByTime, cloneGroupOffset, brokerStatus, getBrokerConfig,
// updateBrokerConfig, wipeWritePerm, addWritePerm, sendMessage,
// consumeMessage, statsAll, and RocketMQ 5.3's createUser, updateUser,
// deleteUser, getUser, listUser, createAcl, updateAcl, deleteAcl, getAcl,
// listAcl, and the controller commands getControllerMetaData,
// getSyncStateSet, getBrokerEpoch, electMaster, cleanBrokerMetadata,
// getControllerConfig and updateControllerConfig (controller.go: against
// apogee-controller at -a/--controllerAddress; getBrokerEpoch through the
// brokers). updateTopic -a and updateSubGroup --attributes take RocketMQ
// 5's attribute changes (+key=value,-key). A command aimed at one broker by its address (-b ADDR:
// updateTopic, updateSubGroup, deleteSubGroup, consumerConnection,
// consumerStatus, brokerStatus, getBrokerConfig, updateBrokerConfig and
// the user and ACL commands) needs no name server, as with mqadmin. With
// access control on, --access-key and --secret-key (or
// $APOGEE_ADMIN_ACCESS_KEY, $APOGEE_ADMIN_SECRET_KEY) sign every request;
// --tls, --tls-ca, --tls-cert/--tls-key, --tls-server-name and
// --tls-insecure reach a TLS broker. Each prints an aligned table, or with --json one
// JSON document on the last line of standard output; exit status 0 on
// success, 1 when the cluster refused or failed the operation, 2 on a usage
// error, which is always printed with what was wrong (an unknown flag or
// command, a missing or malformed value).
//
// Offline commands (the broker must be stopped):
//
//	apogee-admin store verify [flags] DIR
//	apogee-admin store dump [flags] DIR
//
// dump prints the records of a commit-log segment (--segment) or of a
// consume queue (--topic, --queue), as text or JSON lines (--json).
//
// verify checks a broker's data directory (its --data-dir) without changing
// it: every commit-log record (magic, size, offset, CRC) in every segment,
// the consume queues (as strictly as a restart after a clean shutdown, and
// each entry against its record), and the index files' sizes and headers. It
// prints what it found: what a restart and the broker's scrubber would repair
// or set aside. Exit status: 0 when the directory is sound, 1 when it found
// problems, 2 on a usage or I/O error (including a directory in use by a
// running broker).
//
// The layout of the data (segment size, consume-queue file size) is read from
// the files; give it with the flags when the files cannot tell (for example
// when every segment was cut).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/internal/version"
	"github.com/apogeemq/apogee/store"
)

const usageHead = `usage: apogee-admin <command> [flags] [args]
       apogee-admin --version

online commands (mqadmin's names and flags; -n NAMESRV or $NAMESRV_ADDR, or -b BROKER_ADDR
alone for a command aimed at one broker; --json):
`

const usageTail = `
offline commands (on a stopped broker's data directory):
  store verify [flags] DIR   check every record, the consume queues and the index (no change made)
  store dump [flags] DIR     print the records of a segment or a consume queue

Run "apogee-admin <command> --help" for its flags.
`

func usage() string { return usageHead + commandList() + usageTail }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) >= 2 && args[0] == "store" && args[1] == "verify" {
		return storeVerify(args[2:], stdout, stderr)
	}
	if len(args) >= 2 && args[0] == "store" && args[1] == "dump" {
		return storeDump(args[2:], stdout, stderr)
	}
	if len(args) > 0 {
		if code, ok := runOnline(args[0], args[1:], stdout, stderr); ok {
			return code
		}
	}
	if len(args) > 0 && args[0] == "--version" {
		fmt.Fprintln(stdout, version.Get().String("apogee-admin"))
		return 0
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, usage())
		return 0
	}
	switch {
	case len(args) == 0:
		fmt.Fprintln(stderr, "apogee-admin: no command given")
	case args[0] == "store":
		fmt.Fprintf(stderr, "apogee-admin: unknown store command %q: want store verify or store dump\n", strings.Join(args[1:min(len(args), 2)], ""))
	default:
		fmt.Fprintf(stderr, "apogee-admin: unknown command %q (names are mqadmin's; the list follows)\n", args[0])
	}
	fmt.Fprint(stderr, usage())
	return 2
}

// flagError reports a command line pflag refused: 0 for --help (pflag
// printed the usage), else 2 with what was wrong (pflag returns the error
// without printing it under ContinueOnError) and the usage.
func flagError(fs *pflag.FlagSet, name string, err error, stderr io.Writer) int {
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "apogee-admin %s: %v\n", name, err)
	fs.Usage()
	return 2
}

func storeVerify(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("apogee-admin store verify", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	segSize := fs.Int64("segment-size", 0, "commit-log segment size in bytes (mapedFileSizeCommitLog); default: read from the segment files")
	cqBytes := fs.Int64("consume-queue-file-size", 0, "consume-queue file size in bytes (mapedFileSizeConsumeQueue); default: read from the queue files")
	slots := fs.Int("max-hash-slot-num", 0, "index hash slots per file (maxHashSlotNum); default 5000000")
	entries := fs.Int("max-index-num", 0, "index entries per file (maxIndexNum); default 20000000")
	asJSON := fs.Bool("json", false, "print the report as one JSON document on the last line")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: apogee-admin store verify [flags] DIR")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagError(fs, "store verify", err, stderr)
	}
	if fs.NArg() != 1 {
		if fs.NArg() == 0 {
			fmt.Fprintln(stderr, "apogee-admin store verify: no data directory given (the broker's --data-dir)")
		} else {
			fmt.Fprintln(stderr, "apogee-admin store verify: one data directory only")
		}
		fs.Usage()
		return 2
	}
	dir := fs.Arg(0)
	o := store.Options{
		Dir:             dir,
		SegmentSize:     *segSize,
		IndexSlots:      *slots,
		IndexMaxEntries: *entries,
		ScrubRate:       -1,
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = largestFile(filepath.Join(dir, "commitlog", "[0-9]*"))
	}
	if *cqBytes > 0 {
		o.ConsumeQueueEntries = int(*cqBytes / 20)
	} else if n := largestFile(filepath.Join(dir, "consumequeue", "*", "*", "[0-9]*")); n > 0 {
		o.ConsumeQueueEntries = int(n / 20)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := store.Verify(ctx, o)
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			fmt.Fprintf(stderr, "apogee-admin: %s is in use by a running broker: stop it first (%v)\n", dir, err)
		} else {
			fmt.Fprintln(stderr, "apogee-admin:", err)
		}
		return 2
	}
	printReport(stdout, r)
	if *asJSON {
		b, err := json.Marshal(jsonReport(r))
		if err != nil {
			fmt.Fprintln(stderr, "apogee-admin:", err)
			return 2
		}
		fmt.Fprintln(stdout, string(b))
	}
	if !r.OK() {
		return 1
	}
	return 0
}

// largestFile returns the size of the largest file matching pattern (the
// layout's file size: files are created at full size; a cut one is smaller),
// looking at no more than 1,000 of them. 0 when none matches.
func largestFile(pattern string) int64 {
	names, _ := filepath.Glob(pattern)
	var n int64
	for i, name := range names {
		if i == 1000 {
			break
		}
		if st, err := os.Stat(name); err == nil && st.Mode().IsRegular() {
			n = max(n, st.Size())
		}
	}
	return n
}

func printReport(w io.Writer, r *store.VerifyReport) {
	fmt.Fprintf(w, "data directory %s\n", r.Dir)
	if r.CleanShutdown {
		fmt.Fprintln(w, "last shutdown: clean")
	} else {
		fmt.Fprintln(w, "last shutdown: not clean (a crash); a restart recovers the unsynced tail")
	}
	fmt.Fprintf(w, "commit log: %s\n", r.Log)
	fmt.Fprintf(w, "records checked: %d (%d bytes); consume queues: %d; index problems: %d\n",
		r.Scrub.Records, r.Scrub.Bytes, r.Queues, len(r.Index))
	if r.OK() {
		fmt.Fprintln(w, "result: sound")
		return
	}
	fmt.Fprintf(w, "result: %d problems (a restart and the scrubber repair or set aside what can be proven from the log)\n", len(r.Problems))
	for _, p := range r.Problems {
		fmt.Fprintln(w, "  -", p)
	}
}

func jsonReport(r *store.VerifyReport) any {
	type loss struct {
		From, To int64
		Reason   string `json:"reason"`
	}
	var losses []loss
	for _, l := range r.Log.Losses {
		losses = append(losses, loss{l.From, l.To, l.Reason})
	}
	return struct {
		Dir            string   `json:"dir"`
		OK             bool     `json:"ok"`
		CleanShutdown  bool     `json:"clean_shutdown"`
		LogEnd         int64    `json:"log_end"`
		Records        int64    `json:"records"`
		Bytes          int64    `json:"bytes"`
		Queues         int      `json:"queues"`
		DamagedQueues  int      `json:"damaged_queues"`
		LogLosses      []loss   `json:"log_losses"`
		IndexProblems  []string `json:"index_problems"`
		Problems       []string `json:"problems"`
		ProblemSummary string   `json:"summary"`
	}{
		Dir: r.Dir, OK: r.OK(), CleanShutdown: r.CleanShutdown, LogEnd: r.Log.End,
		Records: r.Scrub.Records, Bytes: r.Scrub.Bytes, Queues: r.Queues, DamagedQueues: len(r.DamagedQueues),
		LogLosses: losses, IndexProblems: r.Index, Problems: r.Problems,
		ProblemSummary: strings.TrimSpace(fmt.Sprintf("%d problems", len(r.Problems))),
	}
}
