// The Gloo communicator: CPU buffers over TCP, every collective through Gloo's stock algorithms,
// rendezvous through a Store (comm/store.h). Use make_communicator with backend "gloo"; this
// header exposes the factory (and, through comm/gloo_wire.h, the exact wire-byte figures of Gloo's
// algorithms).
//
// Wire accounting: Gloo exposes no byte counters, so each call adds the payload bytes the Gloo
// algorithm it ran moves for this rank, computed from that algorithm's schedule (the formulas and
// how they were checked: comm/gloo_wire.h, which needs no Gloo so the cost model of
// terngrad/exchange/ternary_collectives.h can use them without this backend).
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
// Security model: without a job secret the transport is unauthenticated and unencrypted, for
// trusted networks only (as torch.distributed's Gloo backend): anyone who can reach a rank's
// ports, or write to the rendezvous store, can join, stall or corrupt a run; the checks above
// catch mistakes and malfunctions, not a peer that lies consistently. With one
// (CommOptions::mac_key, comm/secret.h) every header carries an HMAC under the job key, checked
// before anything else in it: a sender without the secret is refused by rank; payloads and Gloo's
// own headerless algorithms stay unauthenticated, nothing is encrypted.
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
#include "comm/gloo_wire.h"

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
//   magic     a header of garbage bytes;
//   mac       a well-formed header whose MAC is wrong (a stranger without the job secret).
// Only the test driver tests/testing/faulty_main.cpp calls it (tests/cmd/faults_test.cpp); the
// terngrad binary never does. An empty kind clears it; an unknown one throws, naming the known.
struct WireFault {
  std::string kind;
  int rank = -1;
  int64_t call = -1;
};
void inject_wire_fault(const WireFault& fault);
std::vector<std::string> wire_fault_kinds();

}  // namespace tg::comm
