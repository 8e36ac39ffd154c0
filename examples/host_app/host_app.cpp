// host_app: how an inference engine embeds nibble.
//
//   host_app MODEL_DIR [POLICY.toml]
//
// Opens a checkpoint, selects a backend for each quantized layer under a policy (the file given,
// else NIBBLE_CONFIG / NIBBLE_BACKEND), logs every selection trace, runs each layer once on a
// small batch and checks it against nibble's reference kernel. A layer no backend can run is
// reported and skipped: one bad layer does not end the program.
#include <nibble/checkpoint.h>
#include <nibble/nibble.h>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [POLICY.toml]\n", argv[0]);
    return 2;
  }
  try {
    auto registry = nibble::Registry::discover();  // NIBBLE_PLUGIN_PATH, then the install dir
    for (const auto& s : registry->skipped())
      std::printf("[nibble] skipped plugin %s: %s\n", s.path.c_str(), s.reason.c_str());
    const nibble::Policy policy = argc > 2 ? nibble::Policy::load_file(argv[2]) : nibble::Policy::from_environment();
    auto model = nibble::Checkpoint::open(argv[1]);
    std::printf("[nibble] %s: %s\n", argv[1], model->config().summary().c_str());

    int ran = 0, failed = 0;
    for (const auto& layer : model->layers()) {
      if (layer.scheme.kind != nibble::LayerScheme::Kind::quantized) {
        std::printf("[nibble] %s: not run (%s)\n", layer.name.c_str(), layer.scheme.reason.c_str());
        continue;
      }
      const nibble::Selection sel = registry->select(model->spec_of(layer), policy);
      std::printf("[nibble] %s -> %s\n%s", layer.name.c_str(), sel ? sel.backend->name().c_str() : "(none)",
                  sel.trace().c_str());
      if (!sel) {
        ++failed;
        continue;
      }
      try {
        const nibble::CanonicalLinear w = model->load(layer.name);
        auto prepared = sel.backend->prepare(w);
        const nibble::Tensor x = nibble::random_activations(4, w.spec.k, w.spec.act_dtype, 7);
        const nibble::Tensor y = prepared->apply(x);
        const nibble::Comparison c = nibble::compare_to_reference(y, nibble::reference_linear(w, x),
                                                                  nibble::reference_magnitude(w, x), w.spec.act_dtype);
        std::printf("[host] %s: y [4, %lld] max |error| %.3g (%s)\n", layer.name.c_str(), (long long)w.spec.n,
                    c.max_abs_err, c.ok ? "matches the reference" : "MISMATCH");
        ++ran;
        failed += c.ok ? 0 : 1;
      } catch (const nibble::Error& e) {
        std::printf("[host] %s: %s\n", layer.name.c_str(), e.what());
        ++failed;
      }
    }
    std::printf("[host] %d layer(s) ran, %d failed\n", ran, failed);
    return failed ? 1 : 0;
  } catch (const nibble::Error& e) {
    std::fprintf(stderr, "host_app: %s\n", e.what());
    return 2;
  }
}
