// The convergence checks of terngrad/analysis/convergence.h: ridge regression with SGD and TernGrad
// (the paper's Theorem 1), and the moment tests of the ternarizer.
#include "terngrad/analysis/convergence.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "nn/core/error.h"
#include "nn/core/philox.h"
#include "terngrad/ternary_kernels.h"

namespace tg::tern {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- ternarizers ---------------------------------------------------------------------------

// The code base's ternarizer: the packed 2-bit codes of ternarize_pack_cpu, decoded and scaled,
// exactly what one worker's slot contributes to the compressor's aggregate before the 1 / N.
void real_ternarize(const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
                    float* out) {
  if (n <= 0) return;
  if (!(s > 0.0f)) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  // Scratch reused across calls: the ridge check makes millions of calls of ~20 elements.
  thread_local std::vector<uint8_t> packed;
  thread_local std::vector<int32_t> codes;
  packed.resize(packed_bytes(PackFormat::two_bit, n));
  codes.assign(static_cast<size_t>(n), 0);
  ternarize_pack_cpu(g, n, s, seed, stream, PackFormat::two_bit, packed.data());
  unpack_accumulate_cpu(packed.data(), n, PackFormat::two_bit, codes.data());
  scale_accumulated_cpu(codes.data(), n, s, out);
}

// Biased on purpose: the real kernel with scaler 2s (half the keep probability), values +-s.
void half_keep_ternarize(const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
                         float* out) {
  real_ternarize(g, n, 2.0f * s, seed, stream, out);
  for (int64_t i = 0; i < n; ++i) out[i] *= 0.5f;  // exact: 2s * code / 2 = s * code
}

// Biased on purpose: keep iff u < g / s without the fabs, so negative elements are never kept.
void no_abs_ternarize(const float* g, int64_t n, float s, uint64_t seed, uint64_t stream,
                      float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float u = uniform01(philox_word(seed, stream, static_cast<uint64_t>(i)));
    out[i] = (s > 0.0f && u < g[i] / s) ? s : 0.0f;
  }
}

// ---- random data ---------------------------------------------------------------------------

// Standard normals from one Philox stream (Box-Muller on 53-bit uniforms).
class NormalStream {
 public:
  NormalStream(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  double next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const Philox4 r = philox_block(seed_, stream_, block_++);
    const double u1 = 1.0 - uniform01_double(r.v[0], r.v[1]);  // (0, 1]: log is finite
    const double u2 = uniform01_double(r.v[2], r.v[3]);
    const double rad = std::sqrt(-2.0 * std::log(u1));
    spare_ = rad * std::sin(2.0 * M_PI * u2);
    have_spare_ = true;
    return rad * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t seed_, stream_, block_ = 0;
  double spare_ = 0;
  bool have_spare_ = false;
};

double squared_distance(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (size_t j = 0; j < a.size(); ++j) e += (a[j] - b[j]) * (a[j] - b[j]);
  return e;
}

// Checkpoints 0, then round(10^(k / per_decade)) for k = 0, 1, ... below T, then T.
std::vector<int64_t> log_checkpoints(int64_t T, int per_decade) {
  std::vector<int64_t> t = {0};
  for (int k = 0;; ++k) {
    const auto v = static_cast<int64_t>(std::llround(std::pow(10.0, double(k) / per_decade)));
    if (v >= T) break;
    if (v > t.back()) t.push_back(v);
  }
  t.push_back(T);
  return t;
}

}  // namespace

Ternarizer make_ternarizer(const std::string& name) {
  if (name == "real") return real_ternarize;
  if (name == "half-keep") return half_keep_ternarize;
  if (name == "no-abs") return no_abs_ternarize;
  std::string known;
  for (const auto& n : ternarizer_names()) known += (known.empty() ? "" : ", ") + n;
  TG_THROW("unknown ternarizer '", name, "' (known: ", known, ")");
}

std::vector<std::string> ternarizer_names() {
  return {"real", "half-keep", "no-abs"};
}

// ---- linear algebra ------------------------------------------------------------------------

std::vector<double> solve_spd(std::vector<double> a, std::vector<double> b, int64_t d) {
  TG_CHECK(d >= 1 && a.size() == static_cast<size_t>(d * d) && b.size() == static_cast<size_t>(d),
           "solve_spd: expected a ", d, "x", d, " matrix and a vector of ", d, ", got ", a.size(),
           " and ", b.size(), " values");
  // In place: the lower triangle of a becomes L with A = L L^T.
  for (int64_t j = 0; j < d; ++j) {
    double diag = a[j * d + j];
    for (int64_t k = 0; k < j; ++k) diag -= a[j * d + k] * a[j * d + k];
    TG_CHECK(diag > 0 && std::isfinite(diag), "solve_spd: the matrix is not positive definite (",
             "Cholesky pivot ", j, " is ", diag, ", expected > 0)");
    const double ljj = std::sqrt(diag);
    a[j * d + j] = ljj;
    for (int64_t i = j + 1; i < d; ++i) {
      double v = a[i * d + j];
      for (int64_t k = 0; k < j; ++k) v -= a[i * d + k] * a[j * d + k];
      a[i * d + j] = v / ljj;
    }
  }
  for (int64_t i = 0; i < d; ++i) {  // L z = b
    double v = b[i];
    for (int64_t k = 0; k < i; ++k) v -= a[i * d + k] * b[k];
    b[i] = v / a[i * d + i];
  }
  for (int64_t i = d - 1; i >= 0; --i) {  // L^T x = z
    double v = b[i];
    for (int64_t k = i + 1; k < d; ++k) v -= a[k * d + i] * b[k];
    b[i] = v / a[i * d + i];
  }
  return b;
}

std::vector<double> symmetric_eigenvalues(std::vector<double> a, int64_t d) {
  TG_CHECK(d >= 1 && a.size() == static_cast<size_t>(d * d), "symmetric_eigenvalues: expected a ",
           d, "x", d, " matrix, got ", a.size(), " values");
  double norm = 0;
  for (double v : a) norm += v * v;
  // Cyclic Jacobi (Numerical Recipes' rotation): each sweep zeroes every off-diagonal pair once;
  // convergence is quadratic, a handful of sweeps for d <= 100.
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t p = 0; p < d; ++p)
      for (int64_t q = p + 1; q < d; ++q) off += a[p * d + q] * a[p * d + q];
    if (off <= 1e-30 * norm) break;
    for (int64_t p = 0; p < d; ++p) {
      for (int64_t q = p + 1; q < d; ++q) {
        const double apq = a[p * d + q];
        if (apq == 0.0) continue;
        const double theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::hypot(theta, 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < d; ++k) {  // columns p, q
          const double akp = a[k * d + p], akq = a[k * d + q];
          a[k * d + p] = c * akp - s * akq;
          a[k * d + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < d; ++k) {  // rows p, q
          const double apk = a[p * d + k], aqk = a[q * d + k];
          a[p * d + k] = c * apk - s * aqk;
          a[q * d + k] = s * apk + c * aqk;
        }
      }
    }
  }
  std::vector<double> ev(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) ev[i] = a[i * d + i];
  std::sort(ev.begin(), ev.end());
  return ev;
}

// ---- ridge regression ----------------------------------------------------------------------

RidgeProblem ridge_problem(std::vector<double> x, std::vector<double> y, int64_t n, int64_t d,
                           double lambda) {
  TG_CHECK(n >= 1 && d >= 1, "ridge_problem: n = ", n, " and d = ", d, " must be >= 1");
  TG_CHECK(x.size() == static_cast<size_t>(n * d) && y.size() == static_cast<size_t>(n),
           "ridge_problem: expected x of ", n * d, " and y of ", n, " values, got ", x.size(),
           " and ", y.size());
  TG_CHECK(lambda >= 0 && std::isfinite(lambda), "ridge_problem: lambda = ", lambda,
           " (expected >= 0)");
  RidgeProblem p;
  p.n = n;
  p.d = d;
  p.lambda = lambda;
  std::vector<double> h(static_cast<size_t>(d * d), 0.0), rhs(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double* xi = &x[i * d];
    for (int64_t j = 0; j < d; ++j) {
      rhs[j] += xi[j] * y[i] / n;
      for (int64_t k = 0; k < d; ++k) h[j * d + k] += xi[j] * xi[k] / n;
    }
  }
  for (int64_t j = 0; j < d; ++j) h[j * d + j] += lambda;
  p.w_star = solve_spd(h, rhs, d);
  const std::vector<double> ev = symmetric_eigenvalues(h, d);
  p.mu = ev.front();
  p.L = ev.back();
  p.x = std::move(x);
  p.y = std::move(y);
  return p;
}

RidgeProblem make_ridge_problem(const RidgeOptions& o) {
  TG_CHECK(o.samples >= 1 && o.dim >= 1, "ridge: samples = ", o.samples, " and dim = ", o.dim,
           " must be >= 1");
  TG_CHECK(o.noise >= 0 && std::isfinite(o.noise), "ridge: noise = ", o.noise, " (expected >= 0)");
  const int64_t n = o.samples, d = o.dim;
  NormalStream w_rng(o.seed, rng_stream(RngPurpose::data, 0xC0417, 0));
  NormalStream x_rng(o.seed, rng_stream(RngPurpose::data, 0xC0417, 1));
  NormalStream e_rng(o.seed, rng_stream(RngPurpose::data, 0xC0417, 2));
  std::vector<double> w_true(static_cast<size_t>(d)), scale(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) {
    w_true[j] = w_rng.next();
    scale[j] = d == 1 ? 1.0 : 0.5 + static_cast<double>(j) / static_cast<double>(d - 1);
  }
  std::vector<double> x(static_cast<size_t>(n * d)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double dot = 0;
    for (int64_t j = 0; j < d; ++j) {
      x[i * d + j] = scale[j] * x_rng.next();
      dot += x[i * d + j] * w_true[j];
    }
    y[i] = dot + o.noise * e_rng.next();
  }
  return ridge_problem(std::move(x), std::move(y), n, d, o.lambda);
}

double ridge_loss(const RidgeProblem& p, const double* w) {
  double loss = 0, reg = 0;
  for (int64_t i = 0; i < p.n; ++i) {
    double r = -p.y[i];
    for (int64_t j = 0; j < p.d; ++j) r += p.x[i * p.d + j] * w[j];
    loss += 0.5 * r * r;
  }
  for (int64_t j = 0; j < p.d; ++j) reg += w[j] * w[j];
  return loss / p.n + 0.5 * p.lambda * reg;
}

std::vector<double> ridge_gradient(const RidgeProblem& p, const double* w) {
  std::vector<double> g(static_cast<size_t>(p.d), 0.0);
  for (int64_t i = 0; i < p.n; ++i) {
    double r = -p.y[i];
    for (int64_t j = 0; j < p.d; ++j) r += p.x[i * p.d + j] * w[j];
    for (int64_t j = 0; j < p.d; ++j) g[j] += p.x[i * p.d + j] * r / p.n;
  }
  for (int64_t j = 0; j < p.d; ++j) g[j] += p.lambda * w[j];
  return g;
}

SgdOptions resolve_schedule(const RidgeProblem& p, SgdOptions o) {
  TG_CHECK(p.d >= 1 && p.mu > 0 && p.L >= p.mu,
           "ridge SGD: the problem is not strongly convex (mu = ", p.mu, ", L = ", p.L, ")");
  if (o.lr0 <= 0) o.lr0 = 0.25 / p.L;
  if (o.t0 <= 0) o.t0 = 2.0 / (p.mu * o.lr0);
  return o;
}

double loglog_slope(const std::vector<int64_t>& t, const std::vector<double>& error, int64_t from) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int k = 0;
  for (size_t i = 0; i < t.size() && i < error.size(); ++i) {
    if (t[i] < from || t[i] <= 0 || !(error[i] > 0) || !std::isfinite(error[i])) continue;
    const double lx = std::log(static_cast<double>(t[i])), ly = std::log(error[i]);
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
    ++k;
  }
  if (k < 2) return std::numeric_limits<double>::quiet_NaN();
  const double den = k * sxx - sx * sx;
  return den > 0 ? (k * sxy - sx * sy) / den : std::numeric_limits<double>::quiet_NaN();
}

ConvergenceCurve run_ridge_sgd(const RidgeProblem& p, const SgdOptions& opts,
                               const Ternarizer* tern, const ConvergenceCriteria& criteria) {
  TG_CHECK(opts.iterations >= 1, "ridge SGD: iterations = ", opts.iterations, " (expected >= 1)");
  TG_CHECK(opts.workers >= 1 && opts.batch >= 1 && opts.repeats >= 1 && opts.points_per_decade >= 1,
           "ridge SGD: workers (", opts.workers, "), batch (", opts.batch, "), repeats (",
           opts.repeats, ") and points_per_decade (", opts.points_per_decade, ") must all be >= 1");
  TG_CHECK(opts.clip >= 0 && std::isfinite(opts.clip), "ridge SGD: clip = ", opts.clip,
           " (expected >= 0; 0 = scaler max|g|)");
  const SgdOptions o = resolve_schedule(p, opts);
  const int64_t d = p.d, T = o.iterations;
  const int N = o.workers;

  ConvergenceCurve c;
  c.method = tern ? "terngrad" : "sgd";
  c.t = log_checkpoints(T, o.points_per_decade);
  c.error.assign(c.t.size(), 0.0);
  c.lr0 = o.lr0;
  c.t0 = o.t0;
  c.two_mu_c = 2.0 * p.mu * o.lr0 * o.t0;
  auto lr_at = [&](int64_t t) { return o.lr0 / (1.0 + static_cast<double>(t) / o.t0); };
  for (int64_t t : c.t) c.lr.push_back(lr_at(t));

  std::vector<double> w(d), h(d), gw(static_cast<size_t>(N * d));
  std::vector<float> gf(static_cast<size_t>(N * d)), out(d);
  std::vector<int64_t> idx(static_cast<size_t>(o.batch));
  for (int r = 0; r < o.repeats; ++r) {
    const uint64_t tern_seed = rng_stream(RngPurpose::test, o.seed, static_cast<uint64_t>(r));
    std::fill(w.begin(), w.end(), 0.0);
    size_t next = 0;
    bool finite = true;
    for (int64_t t = 0; t <= T; ++t) {
      if (next < c.t.size() && c.t[next] == t) {
        const double e = finite ? squared_distance(w, p.w_star) : kInf;
        c.error[next++] += e / o.repeats;
      }
      if (t == T || !finite) {
        if (!finite) {
          for (; next < c.t.size(); ++next) c.error[next] = kInf;
          break;
        }
        continue;
      }
      // Each worker's minibatch gradient (samples drawn with replacement).
      for (int wk = 0; wk < N; ++wk) {
        const uint64_t stream = rng_stream(RngPurpose::shuffle, static_cast<uint64_t>(t),
                                           static_cast<uint64_t>(wk), static_cast<uint64_t>(r));
        for (int64_t b = 0; b < o.batch; b += 4) {
          const Philox4 blk = philox_block(o.seed, stream, static_cast<uint64_t>(b / 4));
          for (int64_t k = b; k < std::min(b + 4, o.batch); ++k)
            idx[k] = static_cast<int64_t>(
                (static_cast<uint64_t>(blk.v[k - b]) * static_cast<uint64_t>(p.n)) >> 32);
        }
        double* g = &gw[wk * d];
        for (int64_t j = 0; j < d; ++j) g[j] = p.lambda * w[j];
        for (int64_t k = 0; k < o.batch; ++k) {
          const double* xi = &p.x[idx[k] * d];
          double res = -p.y[idx[k]];
          for (int64_t j = 0; j < d; ++j) res += xi[j] * w[j];
          for (int64_t j = 0; j < d; ++j) g[j] += xi[j] * res / static_cast<double>(o.batch);
        }
      }
      std::fill(h.begin(), h.end(), 0.0);
      if (!tern) {
        for (int wk = 0; wk < N; ++wk)
          for (int64_t j = 0; j < d; ++j) h[j] += gw[wk * d + j] / N;
      } else {
        // Shared scaler (the paper's scaler sharing): s = max over workers of each one's max|g| or
        // c * sigma.
        float s = 0;
        for (int wk = 0; wk < N; ++wk) {
          for (int64_t j = 0; j < d; ++j) gf[wk * d + j] = static_cast<float>(gw[wk * d + j]);
          TensorStats st;
          tensor_stats_cpu(&gf[wk * d], d, &st);
          s = std::max(s, static_cast<float>(o.clip > 0 ? o.clip * st.sigma() : st.max_abs));
        }
        for (int wk = 0; wk < N; ++wk) {
          (*tern)(&gf[wk * d], d, s, tern_seed,
                  rng_stream(RngPurpose::ternarize, static_cast<uint64_t>(t),
                             static_cast<uint64_t>(wk), 0),
                  out.data());
          for (int64_t j = 0; j < d; ++j) h[j] += static_cast<double>(out[j]) / N;
        }
      }
      const double lr = lr_at(t);
      for (int64_t j = 0; j < d; ++j) {
        w[j] -= lr * h[j];
        if (!std::isfinite(w[j])) finite = false;
      }
    }
    if (!finite) c.finite = false;
  }
  c.initial = c.error.front();
  c.final = c.error.back();
  c.rel_error = c.initial > 0 ? c.final / c.initial : (c.final == 0 ? 0.0 : kInf);
  c.fit_from = std::max<int64_t>(1, T / 100);
  c.rate = loglog_slope(c.t, c.error, c.fit_from);
  c.pass = c.finite && c.rel_error <= criteria.max_rel_error && std::isfinite(c.rate) &&
           c.rate <= criteria.max_rate;
  return c;
}

// ---- moments of the ternarizer -------------------------------------------------------------

double normal_upper_quantile(double q) {
  TG_CHECK(q > 0 && q < 1, "normal_upper_quantile: q = ", q, " (expected 0 < q < 1)");
  // P(Z > z) = erfc(z / sqrt 2) / 2 is decreasing in z: bisection to full double precision.
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-13; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(mid / std::sqrt(2.0)) > q)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<float> max_abs_scalers(const float* g, std::span<const GradSlot> layout) {
  std::vector<float> s;
  for (const GradSlot& sl : layout) {
    TensorStats st;
    tensor_stats_cpu(g + sl.offset, sl.numel, &st);
    s.push_back(terngrad_scaler(st, 0.0));  // clip 0: max|g|, as the compressor computes it
  }
  return s;
}

MomentCheck check_ternary_moments(const float* g, std::span<const GradSlot> layout,
                                  std::span<const float> scalers, const Ternarizer& tern,
                                  const MomentOptions& o) {
  TG_CHECK(o.draws >= 2, "moment check: draws = ", o.draws, " (expected >= 2)");
  TG_CHECK(o.alpha > 0 && o.alpha < 1, "moment check: alpha = ", o.alpha,
           " (expected 0 < alpha < 1)");
  TG_CHECK(scalers.size() == layout.size(), "moment check: ", scalers.size(),
           " scalers for a layout of ", layout.size(), " tensors");
  MomentCheck res;
  res.draws = o.draws;
  res.alpha = o.alpha;
  res.family =
      o.family > 0 ? o.family : std::max<int64_t>(1, 3 * static_cast<int64_t>(layout.size()));
  res.z_crit_two = normal_upper_quantile(o.alpha / (2.0 * static_cast<double>(res.family)));
  res.z_crit_one = normal_upper_quantile(o.alpha / static_cast<double>(res.family));
  const double D = static_cast<double>(o.draws);

  for (size_t t = 0; t < layout.size(); ++t) {
    const GradSlot& sl = layout[t];
    TG_CHECK(sl.offset >= 0 && sl.numel >= 0, "moment check: slot '", sl.name,
             "' has a negative offset or size");
    const float* gp = g + sl.offset;
    const int64_t n = sl.numel;
    const float sf = scalers[t];
    TensorMoments tm;
    tm.name = sl.name;
    tm.numel = n;
    tm.s = sf;
    double max_abs = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double a = std::fabs(static_cast<double>(gp[k]));
      tm.l1 += a;
      tm.l2sq += a * a;
      max_abs = std::max(max_abs, a);
    }
    TG_CHECK(sf >= max_abs, "moment check: scaler ", sf, " of tensor '", sl.name,
             "' is below its max|g| = ", max_abs,
             " (the identities need s >= max|g|, i.e. no clipping)");
    const double s = sf;

    // D draws: the sum of the outputs per element, and sum_d ||t_d||^2, sum_d ||t_d - g||^2.
    std::vector<double> sum(static_cast<size_t>(n), 0.0);
    std::vector<float> out(static_cast<size_t>(n));
    double sum_sq = 0, sum_mse = 0;
    for (int64_t dr = 0; dr < o.draws; ++dr) {
      tern(gp, n, sf, rng_stream(RngPurpose::test, o.seed, static_cast<uint64_t>(dr)),
           rng_stream(RngPurpose::ternarize, o.step, static_cast<uint64_t>(o.worker), t),
           out.data());
      double sq = 0, mse = 0;
      for (int64_t k = 0; k < n; ++k) {
        const double v = out[k], e = v - gp[k];
        sum[k] += v;
        sq += v * v;
        mse += e * e;
      }
      sum_sq += sq;
      sum_mse += mse;
    }
    tm.excess_measured = sum_sq / D - tm.l2sq;
    tm.mse_measured = sum_mse / D;

    // Exact moments of one draw: X_k = t_k - g_k has variance a (s - a) and fourth central
    // moment p (s - a)^4 + (1 - p) a^4, p = a / s; ||t||^2 = s^2 K, K ~ sum of Bernoulli(p_k).
    double V = 0, proj = 0, var_proj = 0, Q = 0, var_Q = 0, var_K = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double gk = gp[k], a = std::fabs(gk);
      const double p = s > 0 ? a / s : 0.0;
      const double var = a * (s - a);
      const double mu4 = p * std::pow(s - a, 4) + (1 - p) * std::pow(a, 4);
      const double err = sum[k] / D - gk;
      V += var;
      proj += err * gk;
      var_proj += gk * gk * var / D;
      Q += err * err;
      var_Q += 2 * var * var / (D * D) + (mu4 - 3 * var * var) / (D * D * D);
      var_K += p * (1 - p);
    }
    tm.excess_expected = V;
    if (tm.l2sq == 0) {
      // An all-zero tensor: every draw must be exactly zero.
      tm.tested = false;
      tm.pass_mean = Q == 0;
      tm.pass_var = sum_sq == 0;
      res.pass_mean = res.pass_mean && tm.pass_mean;
      res.pass_var = res.pass_var && tm.pass_var;
      res.tensors.push_back(std::move(tm));
      continue;
    }
    tm.tested = true;
    const double norm = std::sqrt(tm.l2sq);
    tm.rel_error = std::sqrt(Q) / norm;
    tm.rel_error_expected = std::sqrt(V / D) / norm;
    // Where the null distribution is degenerate (every |g_k| in {0, s}: t = g exactly), any
    // deviation beyond rounding is a failure.
    const double round_tol = 1e-9 * tm.l2sq;
    proj /= norm;
    var_proj /= tm.l2sq;
    tm.z_proj =
        var_proj > 0 ? proj / std::sqrt(var_proj) : (std::fabs(proj) <= 1e-9 * norm ? 0 : kInf);
    const double M = V / D;
    if (M > 0 && var_Q > 0) {
      // Q ~ c chi2_nu with c nu = M, 2 c^2 nu = var_Q (two moments); Wilson-Hilferty to a z-score.
      const double nu = 2 * M * M / var_Q;
      const double h = 2.0 / (9.0 * nu);
      tm.z_sq = (std::cbrt(Q / M) - (1 - h)) / std::sqrt(h);
    } else {
      tm.z_sq = Q <= round_tol ? 0 : kInf;
    }
    const double se_var = s * s * std::sqrt(var_K / D);
    const double dev = tm.excess_measured - V;
    tm.z_var =
        se_var > 0 ? dev / se_var : (std::fabs(dev) <= round_tol + 1e-9 * s * tm.l1 ? 0 : kInf);
    tm.pass_mean = std::fabs(tm.z_proj) <= res.z_crit_two && tm.z_sq <= res.z_crit_one;
    tm.pass_var = std::fabs(tm.z_var) <= res.z_crit_two;
    res.pass_mean = res.pass_mean && tm.pass_mean;
    res.pass_var = res.pass_var && tm.pass_var;
    res.tensors.push_back(std::move(tm));
  }
  return res;
}

}  // namespace tg::tern
