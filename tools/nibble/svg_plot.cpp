// The bench plot: small multiples (one panel per shape) of % of roofline against M (log2 axis).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "bench.h"

namespace nibble::cli {

std::string bench_svg(const std::vector<BenchPoint>& points, const std::string& title) {
  std::vector<std::string> shapes;
  std::set<std::string> backends_set;
  for (const auto& p : points) {
    if (std::find(shapes.begin(), shapes.end(), p.shape) == shapes.end()) shapes.push_back(p.shape);
    backends_set.insert(p.backend);
  }
  std::vector<std::string> backends(backends_set.begin(), backends_set.end());
  int64_t mmax = 1;
  for (const auto& p : points) mmax = std::max(mmax, p.m);
  const int cols = std::min<int>(4, int(shapes.size())), rows = int((shapes.size() + cols - 1) / std::max(cols, 1));
  const double pw = 300, ph = 220, ml = 46, mt = 28, gap = 24, top = 56;
  const double W = cols * (pw + gap) + 20, H = top + rows * (ph + gap + 30) + 40;
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
      W, H, title);
  // legend
  double lx = 10;
  for (std::size_t b = 0; b < backends.size(); ++b) {
    const char* c = colors[b % 6];
    s += fmt::format("<line x1=\"{0}\" y1=\"38\" x2=\"{1}\" y2=\"38\" stroke=\"{2}\" stroke-width=\"2\"/>"
                     "<text x=\"{3}\" y=\"42\">{4}</text>\n", lx, lx + 20, c, lx + 24, backends[b]);
    lx += 30 + 7 * backends[b].size();
    s += fmt::format("<line x1=\"{0}\" y1=\"38\" x2=\"{1}\" y2=\"38\" stroke=\"{2}\" stroke-width=\"2\" stroke-dasharray=\"4 3\"/>"
                     "<text x=\"{3}\" y=\"42\">{4} dense baseline</text>\n", lx, lx + 20, c, lx + 24, backends[b]);
    lx += 130 + 7 * backends[b].size();
  }
  const double xmax = std::log2(double(mmax));
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const double x0 = 10 + double(i % cols) * (pw + gap), y0 = top + double(i / cols) * (ph + gap + 30);
    const double ax = x0 + ml, ay = y0 + mt, aw = pw - ml - 8, ah = ph - mt - 30;
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n", x0 + ml, y0 + 16, shapes[i]);
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", ax, ay, aw, ah);
    for (int pct = 0; pct <= 100; pct += 25) {
      const double y = ay + ah - ah * pct / 100.0;
      s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#eee\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}%</text>\n", ax, y, ax + aw, y, ax - 4, y + 4, pct);
    }
    for (int e = 0; e <= int(xmax); e += (xmax > 8 ? 2 : 1)) {
      const double x = ax + (xmax > 0 ? aw * e / xmax : 0);
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x, ay + ah + 14, int64_t(1) << e);
    }
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">M</text>\n", ax + aw / 2, ay + ah + 27);
    for (std::size_t b = 0; b < backends.size(); ++b) {
      std::string line, dense;
      for (const auto& p : points) {
        if (p.shape != shapes[i] || p.backend != backends[b]) continue;
        const double x = ax + (xmax > 0 ? aw * std::log2(double(p.m)) / xmax : 0);
        const double pct = std::min(100.0, 100.0 * p.roofline_us / p.time_us);
        line += fmt::format("{:.1f},{:.1f} ", x, ay + ah - ah * pct / 100);
        if (p.dense_us > 0)
          dense += fmt::format("{:.1f},{:.1f} ", x, ay + ah - ah * std::min(100.0, 100.0 * p.roofline_us / p.dense_us) / 100);
      }
      const char* c = colors[b % 6];
      s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", line, c);
      if (!dense.empty())
        s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" stroke-dasharray=\"4 3\"/>\n", dense, c);
    }
  }
  s += fmt::format("<text x=\"10\" y=\"{:.0f}\" fill=\"#555\">y: % of the roofline t_min = max(bytes / BW, flops / F), "
                   "BW and F measured in the same run</text>\n</svg>\n", H - 12);
  return s;
}

}  // namespace nibble::cli
