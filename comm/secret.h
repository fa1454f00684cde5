// The job secret: an optional file of random bytes that every rank of a run reads (the config's
// comm.secret_file, else the environment's TG_SECRET_FILE, for launchers) and that nobody else
// has. With it, what a stranger on the network could otherwise forge is authenticated:
//   - every rendezvous entry: the value travels as kSignedMagic + tag + value, tag = HMAC-SHA256
//     (K, "rdzv" 0 key 0 value); an entry without a valid tag is refused naming its key (and so
//     the rank that should have written it), before anything acts on it;
//   - every message header of the Gloo transport (comm/gloo_comm.h): a 16-byte HMAC-SHA256 of
//     the header's fields (rank, job, collective, call context, length, the payload's last bytes)
//     under K; a header without it is refused naming the sending rank, before its payload is
//     received, so no parameter changes.
// K = HMAC-SHA256(secret, "terngrad job " + job prefix): one key per job, so entries and headers
// of one job cannot be replayed into another that shares the secret.
// Not authenticated: the payloads themselves (a peer that knows the secret is trusted), NCCL's
// traffic (its bootstrap id goes through the signed store, its data does not pass our headers),
// and nothing is encrypted: the secret keeps strangers out, it does not hide the gradients.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/store.h"
#include "nn/core/hash.h"

namespace tg::comm {

// What a signed rendezvous value starts with (a reader without the secret names it).
inline constexpr char kSignedMagic[] = "TGMAC1";  // 6 bytes, no terminator on the wire
inline constexpr size_t kSignedMagicBytes = 6;

// The secret's bytes from `path`, refused (tg::Error, one line naming `what` and the file) unless
// it is a regular file owned by this user, readable by nobody else (no group/other permission
// bits), of 16 to 65536 bytes.
std::string read_secret_file(const std::string& path, const std::string& what);

// The secret to use: options' file if set (what = "comm.secret_file"), else TG_SECRET_FILE from
// `env_value` (what = "TG_SECRET_FILE"), else none. Returns the bytes and where they came from.
struct JobSecret {
  std::string bytes, source;  // source: "comm.secret_file /path" or "TG_SECRET_FILE /path"
};
std::optional<JobSecret> find_job_secret(const std::string& secret_file,
                                         const std::optional<std::string>& env_value);

// K for a job (its rendezvous prefix) under a secret.
Mac256 job_mac_key(const std::string& secret, const std::string& job_prefix);

// `inner` with every value signed on set and checked on get (above). url() names the inner store.
std::unique_ptr<Store> signed_store(std::unique_ptr<Store> inner, const Mac256& key);

}  // namespace tg::comm
