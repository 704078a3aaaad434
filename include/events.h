/* SPDX-License-Identifier: MIT */
/*
 * The event stream: every record that crosses the ring buffer, shared by bpf/ and user/.
 *
 * Each record starts with struct ts_event_hdr; `type` selects the rest. All times are
 * bpf_ktime_get_ns() (CLOCK_MONOTONIC) nanoseconds. Sizes are asserted so that both sides and
 * recorded files agree byte for byte. Only fixed-width types (the includer provides them); only
 * devtime_abi.h, the device-time library's records, is included.
 */
#ifndef TS_EVENTS_H
#define TS_EVENTS_H

#include "devtime_abi.h"

/* Bytes of payload one data record can carry; a larger syscall becomes several records. */
#define TS_CHUNK_BYTES 4096
/* Default bytes copied from one syscall; the rest is counted, never copied (a gap). */
#define TS_CAPTURE_DEFAULT 65536
/* Hard upper bound for --capture-bytes: bounds the kernel loop. */
#define TS_CAPTURE_MAX (1 << 20)
/*
 * Ring buffer size. Every record is written to memory the reader on another CPU read last, so
 * a ring larger than the shared cache makes each write miss: measured with bpf_stats on the
 * development VM, the sys_exit program of a traced 287-byte write cost 1.0-1.6 us with a 1 to
 * 8 MiB ring (differences within run-to-run noise) and 3.4-3.8 us with 64 MiB. 2 MiB hold 0.5 s
 * of 10,000 frames/s; the reader drains every 25 ms and is woken when an eighth is waiting. User
 * space maps the ring twice (for wrap-around), so it counts twice in the tracer's RSS.
 */
#define TS_RING_DEFAULT_MB 2
#define TS_RING_MAX_MB 1024
/* Words of the traced-process bitmap, a bit per tgid: the kernel's largest pid_max, 2^22. */
#define TS_TRACED_BITS_WORDS ((1u << 22) / 64)
/*
 * iovecs walked per readv/writev/sendmsg/recvmsg: the kernel's own limit (UIO_MAXIOV, IOV_MAX in
 * user space), above which such a syscall fails with EINVAL, so every piece of one is walked.
 * Bytes beyond it would be counted as a gap.
 */
#define TS_IOV_MAX 1024

enum ts_event_type {
	TS_EV_DATA = 1,	      /* bytes read from or written to a traced socket */
	TS_EV_CONN_OPEN = 2,  /* first sight of a socket fd (accept, connect or first I/O) */
	TS_EV_CONN_CLOSE = 3, /* close() of a traced socket fd */
	TS_EV_PROC_FORK = 4,  /* a traced process forked: the child is traced too */
	TS_EV_PROC_EXIT = 5,  /* a traced process exited */
	TS_EV_GPU_STEP = 6,   /* a host wait on the GPU returned: the step before it is done */
	TS_EV_GPU_CALL = 7,   /* one CUDA launch or copy (only with --kernels) */
	TS_EV_DEV_RUNS = 8,   /* device work from a device-time library (devtime_abi.h) */
	TS_EV_PROC_MAP = 9,   /* a traced process mapped a file executable (for the loader) */
	TS_EV_BATCH = 10,     /* records of one CPU, in the order it made them (TS_BATCH_BYTES) */
};

/*
 * Batches. A CPU gathers the records its programs make in a buffer of its own and puts them in
 * the ring buffer as one record when the next would not fit in TS_BATCH_BYTES, or when user space
 * asks at a drain (the program ts_batch_flush, run on that CPU): one reservation of the ring for
 * many records. A batch is a header (type TS_EV_BATCH; size, the whole batch; pid, the CPU; tid,
 * the records in it) and the records, each whole and starting at an 8-byte boundary. User space
 * takes them apart and puts every record back in time order before anything else sees it: a
 * batch never reaches the pipeline or a recording.
 */
#define TS_BATCH_BYTES 16384
/* The largest record a batch takes (a power of two); a larger one goes to the ring alone. */
#define TS_BATCH_RECORD_MAX 8192
/* CPUs whose records are batched (map batch_pending has one entry each); those past it, none. */
#define TS_BATCH_CPUS 4096

/* CUDA entry points hooked with uprobes; the value is the probe's bpf_cookie. */
enum ts_cuda_fn {
	TS_CUDA_LAUNCH = 1,   /* cudaLaunchKernel*, cuLaunchKernel* */
	TS_CUDA_GRAPH_LAUNCH, /* cudaGraphLaunch, cuGraphLaunch */
	TS_CUDA_MEMCPY,	      /* cudaMemcpy, cudaMemcpyAsync (kind in the 4th argument) */
	TS_CUDA_MEMCPY_DTOH,  /* cuMemcpyDtoH*: always device to host */
	TS_CUDA_SYNC,	      /* cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
			       * cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize */
};

enum ts_dir {
	TS_DIR_IN = 0,	/* the traced process read the bytes */
	TS_DIR_OUT = 1, /* the traced process wrote the bytes */
};

enum ts_syscall {
	TS_SYS_READ = 1,
	TS_SYS_READV,
	TS_SYS_RECVFROM,
	TS_SYS_RECVMSG,
	TS_SYS_WRITE,
	TS_SYS_WRITEV,
	TS_SYS_SENDTO,
	TS_SYS_SENDMSG,
	TS_SYS_CLOSE,
	TS_SYS_ACCEPT,
	TS_SYS_CONNECT,
	/* Plaintext inside a TLS library (uprobes on SSL_read/SSL_write and their _ex forms): the
	 * bytes before encryption or after decryption, on the connection of the socket the call
	 * used. enter_ns is the library call's entry, exit_ns its return. */
	TS_SYS_TLS_READ,
	TS_SYS_TLS_WRITE,
	TS_SYS_MAX,
};

/* TLS library functions hooked with uprobes; the value is the probe's bpf_cookie. */
enum ts_tls_fn {
	TS_TLS_READ = 1, /* int SSL_read(SSL *, void *buf, int num): bytes, or <= 0 */
	TS_TLS_READ_EX,	 /* int SSL_read_ex(SSL *, void *buf, size_t num, size_t *readbytes): 1 or 0
			  */
	TS_TLS_WRITE,	 /* int SSL_write(SSL *, const void *buf, int num) */
	TS_TLS_WRITE_EX, /* int SSL_write_ex(SSL *, const void *buf, size_t num, size_t *written) */
	TS_TLS_HANDSHAKE, /* int SSL_do_handshake(SSL *): no plaintext; tells which socket */
	/* Go's crypto/tls (register ABI: receiver in RAX, the slice in RBX, RCX; returns in RAX) */
	TS_TLS_GO_READ,	 /* func (c *Conn) Read(b []byte) (int, error) */
	TS_TLS_GO_WRITE, /* func (c *Conn) Write(b []byte) (int, error) */
	TS_TLS_GO_CLOSE, /* func (c *Conn) Close() error: the goroutine's calls are over */
};

struct ts_event_hdr {
	__u32 type; /* enum ts_event_type */
	__u32 size; /* bytes of the whole record, header included */
	__u32 pid;  /* tgid */
	__u32 tid;
};

/*
 * One piece of one read or write syscall. A syscall whose bytes exceed TS_CHUNK_BYTES is sent as
 * several records with the same times; `pos` is the offset of data[0] in this direction of the
 * connection, so user space knows exactly where bytes are missing (lost records, capture limit).
 */
struct ts_data_event {
	struct ts_event_hdr hdr;
	__u64 conn_id;	   /* unique for the tracer's lifetime: survives fd reuse */
	__u64 enter_ns;	   /* sys_enter of the syscall */
	__u64 exit_ns;	   /* sys_exit of the syscall */
	__u64 pos;	   /* stream offset of data[0] in direction `dir` */
	__u64 syscall_pos; /* stream offset of the syscall's first byte */
	/*
	 * Reads only: when the oldest byte this read returned reached the socket (the kernel's
	 * sk_data_ready), so the wait before the server read it is known. 0: not known (the socket
	 * was first seen with bytes already waiting, or bytes were left unread by the previous
	 * read, whose arrival the kernel did not note).
	 */
	__u64 queued_ns;
	__u32 syscall_bytes; /* bytes the syscall returned (all of them, copied or not) */
	__u32 data_bytes;    /* bytes in data[] */
	__s32 fd;
	__u8 dir;     /* enum ts_dir */
	__u8 syscall; /* enum ts_syscall */
	__u8 last;    /* 1 on the syscall's last record */
	__u8 status;  /* enum ts_data_status */
	__u8 data[];  /* data_bytes bytes */
};

/* What a data record with no bytes says about the connection. */
enum ts_data_status {
	TS_DATA_BYTES = 0, /* bytes moved */
	TS_DATA_EOF = 1,   /* a read returned 0: the peer closed its side */
	/* a write failed with EPIPE or ECONNRESET, or a read with ECONNRESET: the peer is gone */
	TS_DATA_RESET = 2,
	/* The connection carries TLS (its first bytes were a TLS record): its encrypted bytes are
	 * not sent; its plaintext comes as TS_SYS_TLS_* records where a TLS library is hooked. */
	TS_DATA_TLS = 3,
};

/* Address family values as in the kernel: AF_UNIX 1, AF_INET 2, AF_INET6 10. */
struct ts_conn_event {
	struct ts_event_hdr hdr;
	__u64 conn_id;
	__u64 ts_ns;
	__s32 fd;
	__u16 family;
	__u16 local_port; /* host byte order */
	__u16 peer_port;
	__u8 syscall; /* what revealed it: accept, connect, or the first read/write */
	__u8 pad[5];
	__u8 local_addr[16]; /* IPv4 in the first 4 bytes */
	__u8 peer_addr[16];
	/* close only: final offsets, so bytes lost at the end of a stream are known */
	__u64 rx_bytes;
	__u64 tx_bytes;
};

struct ts_proc_event {
	struct ts_event_hdr hdr; /* pid: the child (fork), the exiting process, the mapping one */
	__u64 ts_ns;
	__u32 ppid; /* fork: parent tgid */
	union {
		__s32 exit_code; /* exit: the wait status; map: TS_PROC_MAP_HELD or 0 */
		__u32 ptid;	 /* fork: the parent's thread that forked */
	};
	char comm[16];
};

/* A mapping record's process was stopped at the mapping (map `held`): the loader continues it
 * once its probes are in place. */
#define TS_PROC_MAP_HELD 1
/* Processes held at once at most (map `held`); past it, a mapping is not held. */
#define TS_HELD_MAX 1024

/*
 * One GPU step of one process: the CUDA work issued since the previous host wait returned, and
 * the host wait that ended it. Launches are counted in the kernel, not sent one by one.
 */
struct ts_gpu_step_event {
	struct ts_event_hdr hdr; /* pid, and tid of the thread that waited */
	__u64 start_ns;		 /* first CUDA call of the step */
	__u64 wait_start_ns;	 /* entry of the host wait */
	__u64 end_ns;		 /* return of the host wait */
	__u32 launches;		 /* kernel launches */
	__u32 graph_launches;
	__u32 memcpys;	    /* copies of any direction */
	__u32 memcpys_dtoh; /* device-to-host copies (sampled tokens) */
	__u32 waits;	    /* host waits merged into this step (back-to-back waits with no work) */
	__u32 pad;
};

/* One CUDA call, sent only when user space asks for per-launch records (--kernels). */
struct ts_gpu_call_event {
	struct ts_event_hdr hdr;
	__u64 ts_ns;
	__u32 fn;   /* enum ts_cuda_fn */
	__u32 kind; /* cudaMemcpyKind for copies, else 0 */
};

/*
 * One call of the device-time library's probe (devtime_abi.h, CUPTI's library today): up to
 * TS_RUNS_PER_PROBE runs of device work and the library's counters. The record has its full size
 * whatever n is. abi is the library's TS_DEVTIME_ABI; for any other value n is 0 and nothing but
 * abi was copied.
 */
struct ts_dev_runs_event {
	struct ts_event_hdr hdr;
	__u32 abi;
	__u32 n;
	struct ts_devtime_stats stats;
	struct ts_dev_run runs[TS_RUNS_PER_PROBE];
};
/* Under TS_DEVTIME_ABI 1 the library's counters were the first 96 bytes of today's (the rest
 * did not exist: read as 0), and a record held only those: its size, as older recordings
 * hold it. A library of version 1 is still read, live and replayed. */
#define TS_DEVTIME_ABI_V1 1
#define TS_DEVTIME_STATS_V1_BYTES 96
#define TS_DEV_RUNS_V1_BYTES (24 + TS_DEVTIME_STATS_V1_BYTES + 80 * TS_RUNS_PER_PROBE)

/* Counters kept per CPU in the kernel and summed by user space (map `stats`). */
enum ts_stat {
	TS_STAT_EVENTS,		  /* records submitted */
	TS_STAT_LOST_EVENTS,	  /* records the ring buffer had no room for */
	TS_STAT_LOST_BYTES,	  /* payload bytes in those records */
	TS_STAT_UNCAPTURED_BYTES, /* bytes past the capture limit or the iovec limit */
	TS_STAT_COPY_FAILED,	  /* bpf_probe_read_user failures (bytes are counted uncaptured) */
	TS_STAT_SYSCALLS,	  /* traced socket syscalls */
	TS_STAT_CONN_TABLE_FULL,  /* sockets not traced because map `conns` was full */
	TS_STAT_TLS_CIPHER_BYTES, /* encrypted bytes of TLS connections, not sent */
	TS_STAT_TLS_UNJOINED,	  /* TLS plaintext calls whose socket was not found (bytes lost) */
	/* From a TLS write call's entry to the entry of the socket write that carried its bytes
	 * (inside the call, or the event loop's next write of that socket): total and count. */
	TS_STAT_TLS_WIRE_NS,
	TS_STAT_TLS_WIRE_WRITES,
	TS_STAT_MAX,
};

#define TS_STAT_NAMES                                                                     \
	{                                                                                 \
		"events", "lost_events", "lost_bytes", "uncaptured_bytes", "copy_failed", \
		    "syscalls", "conn_table_full", "tls_cipher_bytes", "tls_unjoined",    \
		    "tls_wire_ns", "tls_wire_writes"                                      \
	}

/* Key of map `conns`: user space deletes the entries of a process that exited. */
struct ts_conn_key {
	__u32 pid;
	__s32 fd;
};

_Static_assert(sizeof(struct ts_event_hdr) == 16, "ts_event_hdr layout");
_Static_assert(sizeof(struct ts_data_event) == 80, "ts_data_event layout");
_Static_assert(sizeof(struct ts_conn_event) == 96, "ts_conn_event layout");
_Static_assert(sizeof(struct ts_proc_event) == 48, "ts_proc_event layout");
_Static_assert(sizeof(struct ts_gpu_step_event) == 64, "ts_gpu_step_event layout");
_Static_assert(sizeof(struct ts_gpu_call_event) == 32, "ts_gpu_call_event layout");
_Static_assert(sizeof(struct ts_dev_run) == 80, "ts_dev_run layout");
_Static_assert(sizeof(struct ts_devtime_stats) == 192, "ts_devtime_stats layout");
_Static_assert(sizeof(struct ts_dev_runs_event) == 24 + 192 + 80 * TS_RUNS_PER_PROBE,
	       "ts_dev_runs_event layout");

#endif
