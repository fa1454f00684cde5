// The Gloo communicator: CPU buffers over TCP, every collective through Gloo's stock algorithms,
// rendezvous through a Store (comm/store.h). Use make_communicator with backend "gloo"; this
// header exposes the factory and the exact wire-byte figures of Gloo's algorithms.
//
// Wire accounting: Gloo exposes no byte counters, so each call adds the payload bytes the Gloo
// algorithm it ran moves for this rank, computed from that algorithm's schedule (B = bytes per
// rank, P ranks, this rank r; TCP/IP and Gloo message headers are not counted):
//   allreduce  ring (gloo::allreduce, RING): reduce-scatter then allgather over P chunks, each
//              chunk a whole number of segments of ceil(B / S) bytes rounded up to the element
//              size (S = segment count: a multiple of P, at least 2P, segments <= 1 MiB), the last
//              chunks short or empty. Rank r sends every chunk but its own in the first phase and
//              every chunk but chunk r - 1 in the second; receives all but chunk r + 1, then all
//              but chunk r. With C(c) the size of chunk c:
//                sent = 2B - C(r) - C(r - 1),   received = 2B - C(r + 1) - C(r)
//              = 2 (P - 1) B / P each way when the chunks come out equal (B a multiple of
//              P * element size * segments per chunk; always for P = 2 where it is B).
//   allgather  ring with the block halved: sent = received = (P - 1) B.
//   alltoall   pairwise (gloo::alltoall): one block to and from each peer, sent = received =
//              (P - 1) B (B = one block).
//   gather     flat: a non-root sends B to the root; the root receives (P - 1) B.
//   broadcast  binomial tree from the root: a non-root receives B once; virtual rank
//              v = (r - root) mod P sends B to v + 2^i for every i with 2^i > v and v + 2^i < P
//              (the root sends ceil(log2 P) copies when P is a power of two, not P - 1).
//   barrier    dissemination barrier of empty messages: 0.
// Summed over ranks every collective moves what comm/wire_model.h says (up to its rounding); per
// rank the allreduce (uneven chunks) and the broadcast (tree vs flat) can differ from that model.
// Checked once against the bytes each rank's process actually wrote (/proc/self/io wchar): equal
// up to Gloo's fixed 48-byte header per message.
//
// Floats: Gloo's ring reduces each chunk in a rotation that depends on the chunk, so an f32 sum is
// not the rank-order sum, but each chunk is reduced once (chunk c at rank c, the end of its trip
// round the ring) and then copied verbatim to every rank in the allgather phase: all ranks end
// with bit-identical results, the same from run to run for the same P and n.
//
// Peers and binding: every allgather/alltoall message is preceded by a small header per peer
// (rank, job, collective counter, call context, length, the payload's last bytes; not counted in
// wire()), checked before the payload is received: a peer that sends the wrong length, a truncated
// message, another job's or another collective's message, or one about another step, bucket or
// layout, is named in the error. Every listening socket is
// bound to the one address of CommOptions::interface, else of CommOptions::hostname, else of this
// host's name; a name that resolves to the wildcard address is refused.
// Failure: a collective whose transfer fails in Gloo's transport (a peer died, closed its
// connection, or did not take part within the timeout) closes all of this rank's connections
// before it throws, so Gloo's transport thread touches none of that collective's buffers (the
// caller's memory included) once the error reaches the caller (gloo_comm.cpp says why); the
// communicator then refuses every later call, and the peers' pending transfers with this rank
// fail at once instead of at their own timeout.
// Security model: the transport is unauthenticated and unencrypted, for trusted networks only
// (as torch.distributed's Gloo backend): anyone who can reach a rank's ports, or write to the
// rendezvous store, can join, stall or corrupt a run; the checks above catch mistakes and
// malfunctions, not a peer that lies consistently.
//
// Process-wide side effect: the first Gloo communicator sets SIGPIPE to ignored if it was at its
// default. Gloo writes sockets with writev, and a write to a peer that died would otherwise kill
// this process with SIGPIPE instead of raising an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tg::comm {

// A communicator of options.size ranks meeting under `prefix` in `store`: every rank publishes its
// world size and Gloo's TCP addresses, then connects to every other rank (full mesh). Throws
// tg::Error for bad options (rank out of range, non-CPU device), a rank that does not arrive
// within options.timeout (naming the missing ranks), a mismatched world size, or a network
// interface / hostname that cannot be resolved.
std::unique_ptr<Communicator> make_gloo_communicator(const CommOptions& options, Store& store,
                                                     const std::string& prefix);

// Test-only fault injection: rank `rank` of every Gloo communicator made afterwards in this
// process misbehaves in its `call`-th (0-based) allgather/alltoall exchange, as a hostile or
// broken peer would:
//   length    header and payload announce 8 bytes more than the collective's block;
//   truncate  an honest header, then only half the payload;
//   job       the header of another job;
//   seq       the header of the next collective (a rank one collective ahead);
//   context   another call context (a rank aggregating another step, bucket or layout);
//   magic     a header of garbage bytes.
// Only the test driver tests/testing/faulty_main.cpp calls it (tests/cmd/faults_test.cpp); the
// terngrad binary never does. An empty kind clears it; an unknown one throws, naming the known.
struct WireFault {
  std::string kind;
  int rank = -1;
  int64_t call = -1;
};
void inject_wire_fault(const WireFault& fault);
std::vector<std::string> wire_fault_kinds();

// The per-rank wire bytes of Gloo's algorithms (see above); all are {0, 0} for P = 1 or B = 0.
namespace gloo_wire {
WireBytes allreduce(uint64_t bytes, size_t element_size, int p, int rank);
WireBytes allgather(uint64_t bytes, int p);
WireBytes alltoall(uint64_t bytes, int p);
WireBytes gather(uint64_t bytes, int p, int rank, int root);
WireBytes broadcast(uint64_t bytes, int p, int rank, int root);
}  // namespace gloo_wire

}  // namespace tg::comm
