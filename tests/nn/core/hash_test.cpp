// SHA-256 against the FIPS 180-2 appendix / NIST CSRC example vectors, MD5 against the RFC 1321
// appendix A.5 test suite; incremental updates split at every offset must equal the one-shot
// digest; md5_file of the shared MNIST files must equal the md5s in shared/data/README.md; FNV-1a
// against the reference implementation's published test vectors; to_hex byte by byte.
#include "nn/core/hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "nn/core/error.h"

namespace tg {
namespace {

struct Vector {
  std::string message;
  const char* digest;
};

const std::string k448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
const std::string k896 =
    "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmn"
    "opqrsmnopqrstnopqrstu";

std::vector<uint8_t> pseudo_random_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  uint32_t x = 0x12345678;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = uint8_t(x >> 24);
  }
  return v;
}

TEST(Sha256, FipsVectors) {
  const Vector vectors[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {k448, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {k896, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {std::string(1000000, 'a'),
       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (const auto& v : vectors) {
    EXPECT_EQ(sha256_hex(v.message.data(), v.message.size()), v.digest)
        << "message of " << v.message.size() << " bytes";
  }
}

TEST(Sha256, MillionAInChunksOf1000) {
  // The FIPS long-message vector fed the way a file reader would, in many updates.
  const std::string chunk(1000, 'a');
  Sha256 h;
  for (int i = 0; i < 1000; ++i) h.update(chunk.data(), chunk.size());
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Md5, Rfc1321Suite) {
  const Vector vectors[] = {
      {"", "d41d8cd98f00b204e9800998ecf8427e"},
      {"a", "0cc175b9c0f1b6a831c399e269772661"},
      {"abc", "900150983cd24fb0d6963f7d28e17f72"},
      {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
      {"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
      {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
       "d174ab98d277d9f5a5611c2c9f419d9f"},
      {"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
       "57edf4a22be3c955ac49da2e2107b67a"},
  };
  for (const auto& v : vectors) {
    EXPECT_EQ(md5_hex(v.message.data(), v.message.size()), v.digest) << "\"" << v.message << "\"";
  }
}

// Every split point of a message spanning several blocks (and every padding case: tails of
// 0..63 bytes, including 55/56 where the length no longer fits in the last block).
template <typename Hasher, typename OneShot>
void check_splits(const std::vector<uint8_t>& msg, OneShot one_shot) {
  const std::string want = one_shot(msg.data(), msg.size());
  for (size_t cut = 0; cut <= msg.size(); ++cut) {
    Hasher h;
    h.update(msg.data(), cut);
    h.update(msg.data() + cut, msg.size() - cut);
    ASSERT_EQ(h.hex(), want) << "split at " << cut << " of " << msg.size();
  }
  // Three pieces, byte-at-a-time in the middle.
  Hasher h;
  h.update(msg.data(), 3);
  for (size_t i = 3; i + 5 < msg.size(); ++i) h.update(msg.data() + i, 1);
  h.update(msg.data() + msg.size() - 5, 5);
  EXPECT_EQ(h.hex(), want);
}

TEST(Sha256, IncrementalEqualsOneShotAtEverySplit) {
  check_splits<Sha256>(std::vector<uint8_t>(k896.begin(), k896.end()), sha256_hex);
  for (size_t n : {55, 56, 63, 64, 65, 200})
    check_splits<Sha256>(pseudo_random_bytes(n), sha256_hex);
}

TEST(Md5, IncrementalEqualsOneShotAtEverySplit) {
  check_splits<Md5>(std::vector<uint8_t>(k896.begin(), k896.end()), md5_hex);
  for (size_t n : {55, 56, 63, 64, 65, 200}) check_splits<Md5>(pseudo_random_bytes(n), md5_hex);
}

TEST(Checksum, HexResetsTheHasher) {
  Sha256 s;
  s.update("abc", 3);
  EXPECT_EQ(s.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(s.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Md5 m;
  m.update("abc", 3);
  EXPECT_EQ(m.hex(), "900150983cd24fb0d6963f7d28e17f72");
  m.update("a", 1);
  EXPECT_EQ(m.hex(), "0cc175b9c0f1b6a831c399e269772661");
}

TEST(Checksum, Md5FileOfSharedMnistMatchesReadme) {
  const std::string dir = TG_SHARED_DATA_DIR "/mnist/";
  const Vector files[] = {
      {"train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"},
      {"train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"},
      {"t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"},
      {"t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"},
  };
  for (const auto& f : files) EXPECT_EQ(md5_file(dir + f.message), f.digest) << f.message;
}

TEST(Checksum, FileDigestOfMissingFileThrowsNamingIt) {
  try {
    sha256_file("/nonexistent/tg_checksum_missing.bin");
    FAIL() << "expected tg::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tg_checksum_missing.bin"), std::string::npos)
        << e.what();
  }
}

// RFC 4231's test cases 1, 2 and 6 (a 131-byte key, hashed first), and the precomputed-key form
// against the one-shot for keys and messages of every length around SHA-256's 64-byte block.
TEST(HmacSha256, Rfc4231VectorsAndThePrecomputedKeyAgree) {
  struct Case {
    std::string key, data, mac;
  };
  const std::vector<Case> cases = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
  };
  for (const Case& c : cases) {
    const Mac256 one = hmac_sha256(c.key.data(), c.key.size(), c.data.data(), c.data.size());
    EXPECT_EQ(to_hex(one.data(), one.size()), c.mac) << c.data;
    const Mac256 pre = HmacSha256(c.key.data(), c.key.size()).mac(c.data.data(), c.data.size());
    EXPECT_EQ(to_hex(pre.data(), pre.size()), c.mac) << c.data;
  }
  std::string key, data;
  for (size_t k = 0; k <= 130; k += 13) {
    key.assign(k, static_cast<char>(k + 1));
    const HmacSha256 h(key.data(), key.size());
    for (size_t n : {0, 1, 47, 48, 55, 56, 63, 64, 65, 200}) {
      data.assign(n, static_cast<char>(n * 7));
      EXPECT_EQ(h.mac(data.data(), n), hmac_sha256(key.data(), key.size(), data.data(), n))
          << "key " << k << " bytes, message " << n;
    }
  }
}

TEST(Fnv1a64, ReferenceVectors) {
  // The FNV authors' test suite (isthe.com/chongo/tech/comp/fnv, 64-bit FNV-1a column).
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  // Continuing from a piece's hash is hashing the concatenation.
  EXPECT_EQ(fnv1a64("bar", fnv1a64("foo")), fnv1a64("foobar"));
}

TEST(ToHex, LowercaseTwoDigitsPerByte) {
  const unsigned char bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
  EXPECT_EQ(to_hex(bytes, sizeof bytes), "00017f80abff");
  EXPECT_EQ(to_hex(bytes, 0), "");
}

}  // namespace
}  // namespace tg
