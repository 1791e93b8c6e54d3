// cli/common.cpp: see common.h.
#include "cli/common.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdio>

#include "bench/sysinfo.h"
#include "comm/nccl.h"
#include "core/error.h"
#include "core/log.h"
#include "core/output_path.h"
#include "core/provenance.h"
#include "core/suggest.h"
#include "ops/cuda/library_versions.h"

namespace tb::cli {

namespace {

// Help lines without CLI11's validator text after the type ("--steps INT:INT >= 1=10", "TEXT:{cuda,cpu}=cuda"):
// the type, the default, "..." for a list, REQUIRED; each option's own text says its range and choices.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    std::string out;
    if (opt->get_type_size() != 0) {
      const std::string type = opt->get_type_name();
      if (!type.empty()) out += " " + type.substr(0, type.find(':'));
      if (!opt->get_default_str().empty()) out += "=" + opt->get_default_str();
      if (opt->get_expected_max() == CLI::detail::expected_max_vector_size)
        out += " ...";
      else if (opt->get_expected_min() > 1)
        out += " x " + std::to_string(opt->get_expected());
      if (opt->get_required()) out += " REQUIRED";
    }
    return out;
  }
};

void clean_help(CLI::App& app) {
  app.formatter(std::make_shared<HelpFormatter>());
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) clean_help(*sub);
}

}  // namespace

std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  clean_help(app);
  try {
    app.parse(argc, argv);
    // CLI11 reads an empty value as 0 for a number: refused, as any other value that is not a number.
    for (const auto* o : app.get_options()) {
      const std::string type = o->get_type_name();
      if (!type.starts_with("INT") && !type.starts_with("UINT") && !type.starts_with("FLOAT") &&
          !type.starts_with("NUMBER"))
        continue;
      for (const auto& v : o->results())
        if (v.find_first_not_of(" \t") == std::string::npos) {
          std::fprintf(stderr, "%s: %s: an empty value; give a number (see %s --help)\n", app.get_name().c_str(),
                       o->get_name().c_str(), app.get_name().c_str());
          return kUsage;
        }
    }
    return std::nullopt;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    if (const auto* extras = dynamic_cast<const CLI::ExtrasError*>(&e)) {
      (void)extras;
      std::vector<std::string> names;
      for (const auto* o : app.get_options()) {
        for (const auto& l : o->get_lnames()) names.push_back("--" + l);
        for (const auto& s : o->get_snames()) names.push_back("-" + s);
      }
      for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (!a.starts_with("-")) continue;
        a = a.substr(0, a.find('='));
        if (std::find(names.begin(), names.end(), a) == names.end()) {
          msg = fmt::format("unknown option '{}'{}", a, did_you_mean(a, names));
          break;
        }
      }
    }
    std::fprintf(stderr, "%s: %s (see %s --help)\n", app.get_name().c_str(), msg.c_str(), app.get_name().c_str());
    return kUsage;
  }
}

CLI::Validator whole_number(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        long long v = 0;
        size_t used = 0;
        try {
          v = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || text.find_first_of(".eE") != std::string::npos)
          return fmt::format("'{}' is not a whole number", text);
        if (v < lo) return fmt::format("{} is less than {}", v, lo);
        if (v > hi) return fmt::format("{} is more than {}, the most this takes", v, hi);
        return {};
      },
      hi == 2147483647 ? fmt::format("INT >= {}", lo) : fmt::format("INT {}..{}", lo, hi));
}

void CommonOptions::add_to(CLI::App& app, bool with_out) {
  app.add_option("-g,--gpus", gpus, "use the first N visible GPUs (default: all)")->check(whole_number(1));
  app.add_option("-d,--devices", devices, "CUDA device indices to use, e.g. 0,2 (overrides --gpus)")->delimiter(',');
  app.add_option("--references", references, "references folder (default: the one next to the binary)");
  if (with_out) app.add_option("-o,--out", out, "results folder (default: results/<run id>)");
}

Devices select_devices(std::string_view command, const CommonOptions& opt, int min_gpus) {
  Devices d;
  const int visible = bench::visible_gpu_count();
  if (visible == 0) {
    std::fprintf(stderr, "trainbench %.*s: needs a GPU: %s\n", int(command.size()), command.data(),
                 bench::no_gpu_reason().c_str());
    d.exit = kUsage;
    return d;
  }
  if (!opt.devices.empty()) {
    for (int i : opt.devices)
      if (i < 0 || i >= visible) {
        std::fprintf(stderr, "trainbench %.*s: GPU %d does not exist: %d visible (0..%d)\n", int(command.size()),
                     command.data(), i, visible, visible - 1);
        d.exit = kUsage;
        return d;
      }
    d.list = opt.devices;
  } else {
    const int n = opt.gpus > 0 ? opt.gpus : visible;
    if (n > visible) {
      std::fprintf(stderr, "trainbench %.*s: asked for %d GPUs, %d visible (check CUDA_VISIBLE_DEVICES)\n",
                   int(command.size()), command.data(), n, visible);
      d.exit = kUsage;
      return d;
    }
    for (int i = 0; i < n; ++i) d.list.push_back(i);
  }
  if (int(d.list.size()) < min_gpus) {
    std::fprintf(stderr, "trainbench %.*s: needs %d GPUs, %zu selected\n", int(command.size()), command.data(),
                 min_gpus, d.list.size());
    d.exit = kUsage;
  }
  return d;
}

nlohmann::json lora_json(const model::LoraConfig& l) {
  return {{"rank", l.rank},
          {"alpha", l.scale() * l.rank},
          {"dropout", l.dropout},
          {"targets", model::lora_targets_name(l.targets)}};
}

nlohmann::json library_versions() {
  nlohmann::json v = ops::library_versions();
  v["nccl"] = nccl_version();
  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) v["cuda_runtime"] = fmt::format("{}.{}", rt / 1000, rt % 1000 / 10);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) v["cuda_driver"] = fmt::format("{}.{}", drv / 1000, drv % 1000 / 10);
  cudaGetLastError();
  return v;
}

RunOutput open_run(const CommonOptions& opt, int argc, char** argv) {
  RunOutput run;
  run.run_id = make_run_id();
  run.dir = opt.out ? *opt.out : std::filesystem::path("results") / run.run_id;
  require_output_dir(run.dir);
  nlohmann::json prov = host_provenance(argc, argv, run.run_id);
  prov["system"] = bench::gpu_info();
  prov["versions"] = library_versions();
  run.run_file = write_run_file(run.dir, run.run_id, prov);
  if (run.run_file != "run.json")
    log::warn("{} holds another run's run.json: this run's provenance is {}", run.dir.string(), run.run_file);
  run.sink = std::make_unique<JsonlSink>(run.dir / "results.jsonl", run.run_id);
  return run;
}

void print_results_location(const RunOutput& run) {
  if (!run.sink->still_there())
    raise_error(Error::Kind::io, fmt::format("{} was deleted or replaced during the run: its {} records are lost",
                                             run.sink->path().string(), run.sink->count()));
  std::printf("\nresults: %s (%d records), provenance: %s\n", (run.dir / "results.jsonl").c_str(), run.sink->count(),
              (run.dir / run.run_file).c_str());
}

Systems load_systems_for(const CommonOptions& opt, int dev) {
  Systems s;
  s.all = recipe::load_systems(recipe::find_references_dir(opt.references) / "systems");
  cudaDeviceProp prop{};
  TB_CHECK(cudaGetDeviceProperties(&prop, dev));
  s.match = recipe::match_system(s.all, prop.name);
  if (!s.match) log::warn("no references/systems/*.toml matches '{}': no datasheet peaks or expectations", prop.name);
  return s;
}

double peak_tflops_or_warn(const CommonOptions& opt, int dev, std::string_view precision) {
  try {
    const Systems sys = load_systems_for(opt, dev);
    return sys.match ? sys.match->peak_tflops(precision) : 0.0;
  } catch (const Error& e) {
    log::warn("no MFU: {}", e.what());
    return 0.0;
  }
}

}  // namespace tb::cli
