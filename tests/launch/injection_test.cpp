// Tests launch/safe_text and its use in launch/sbatch and launch/k8s: values that would end a line, a comment or a
// YAML document early (newlines, carriage returns, NUL, escape characters, YAML document markers) are refused with one
// message, from the request structs and from the command line (flags and the site's environment variables); what is
// rendered from hostile but legal values parses back to exactly what was asked: `bash -n`, every line before the
// shell body an #SBATCH directive or a comment, the script run with stand-ins for srun and trainbench passing each
// argument through byte for byte; the manifests read back by PyYAML as the documents rendered, no more.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../support/cli_run.h"
#include "../support/shell.h"
#include "core/error.h"
#include "launch/k8s.h"
#include "launch/safe_text.h"
#include "launch/sbatch.h"
#include "recipe/recipe.h"

namespace {
namespace fs = std::filesystem;
using namespace tb::launch;
using tb::testing_support::run_cli;
using tb::testing_support::run_shell;

const std::vector<std::string> kHostile = {
    "x\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: pwned, namespace: kube-system}",
    "x\ntouch PWNED", "x\rtouch PWNED", std::string("x\0y", 3), "x\x1b[2J", "x\x7f", "x\ttab"};

fs::path temp_dir(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("tb_inject_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

fs::path write_file(const fs::path& f, const std::string& text, bool exec = false) {
  std::ofstream(f, std::ios::binary) << text;
  if (exec) ::chmod(f.c_str(), 0755);
  return f;
}

TEST(SafeText, ControlCharactersAndNames) {
  EXPECT_EQ(control_char_problem("plain text, with 'quotes' and $vars"), "");
  EXPECT_EQ(control_char_problem("a\nb"), "a newline at byte 1");
  for (const auto& h : kHostile) EXPECT_NE(control_char_problem(h), "") << printable(h);
  EXPECT_EQ(printable("a\nb\x01"), "a\\nb\\x01");
  EXPECT_TRUE(dns1123_label("tb-llama3-1-8b"));
  for (const char* bad : {"", "-a", "a-", "A", "a_b", "a.b", "a b", "a\n"}) EXPECT_FALSE(dns1123_label(bad)) << bad;
  EXPECT_FALSE(dns1123_label(std::string(64, 'a')));
  EXPECT_TRUE(dns1123_subdomain("bench-results.team1"));
  EXPECT_FALSE(dns1123_subdomain("bench..results"));
  EXPECT_TRUE(env_name("NCCL_IB_HCA"));
  EXPECT_FALSE(env_name("1A"));
  EXPECT_FALSE(env_name("A=B"));
}

SlurmJob slurm_job(const fs::path& dir) {
  SlurmJob j;
  j.command = "run";
  j.name = "tb-tiny";
  j.summary = "tiny on 1 node";
  j.nodes = 1;
  j.tasks_per_node = 1;
  j.gpus_per_node = 0;
  j.dir = dir;
  j.trainbench = (dir / "fake-trainbench").string();
  j.args = {"run", "tiny", "--device", "cpu"};
  return j;
}

TEST(SbatchInjection, EveryFieldRefusesControlCharacters) {
  const fs::path dir = "/shared/x";
  using Set = void (*)(SlurmJob&, const std::string&);
  const std::vector<std::pair<const char*, Set>> fields = {
      {"sbatch", [](SlurmJob& j, const std::string& v) { j.sbatch_extra = {"--qos=" + v}; }},
      {"srun", [](SlurmJob& j, const std::string& v) { j.srun_extra = {"--cpu-bind=" + v}; }},
      {"setup", [](SlurmJob& j, const std::string& v) { j.setup = {"module load " + v}; }},
      {"env", [](SlurmJob& j, const std::string& v) { j.env = {{"NCCL_DEBUG", v}}; }},
      {"summary", [](SlurmJob& j, const std::string& v) { j.summary = v; }},
      {"command", [](SlurmJob& j, const std::string& v) { j.command = v; }},
      {"arg", [](SlurmJob& j, const std::string& v) { j.args.push_back(v); }},
      {"array", [](SlurmJob& j, const std::string& v) { j.array = {{"--set", v}}; }},
      {"image", [](SlurmJob& j, const std::string& v) { j.container_image = v; }},
      {"mount", [](SlurmJob& j, const std::string& v) { j.container_mounts = {v}; }},
      {"trainbench", [](SlurmJob& j, const std::string& v) { j.trainbench = v; }},
      {"partition", [](SlurmJob& j, const std::string& v) { j.partition = v; }},
      {"mpi", [](SlurmJob& j, const std::string& v) { j.mpi = v; }},
  };
  for (const auto& [name, set] : fields)
    for (const auto& h : kHostile) {
      SlurmJob j = slurm_job(dir);
      set(j, h);
      EXPECT_THROW(render_sbatch(j), tb::Error) << name << ": " << printable(h);
    }
  SlurmJob j = slurm_job(dir);
  for (const char* not_an_option : {"qos=high", "-1", "--", "---x", "--=x", "-"}) {  // sbatch would not read these
    j.sbatch_extra = {not_an_option};
    EXPECT_THROW(render_sbatch(j), tb::Error) << not_an_option;
  }
  j.sbatch_extra = {"-p batch", "--qos=high", "--comment=a b"};
  EXPECT_NO_THROW(render_sbatch(j));
  j = slurm_job(dir);
  j.env = {{"A;touch PWNED", "1"}};
  EXPECT_THROW(render_sbatch(j), tb::Error);
}

// The script's lines up to `set -uo pipefail`: the shebang, comments and #SBATCH directives only.
void expect_header_is_directives(const std::string& script, int expected_extra) {
  std::istringstream in(script);
  std::string line;
  int n = 0, extra = 0;
  while (std::getline(in, line) && line != "set -uo pipefail") {
    ++n;
    if (n == 1) {
      EXPECT_EQ(line, "#!/bin/bash");
      continue;
    }
    EXPECT_TRUE(line.starts_with("#SBATCH --") || line.starts_with("# ")) << "line " << n << ": " << line;
    if (line.starts_with("#SBATCH --comment") || line.starts_with("#SBATCH --qos")) ++extra;
  }
  EXPECT_EQ(line, "set -uo pipefail") << "no shell body";
  EXPECT_EQ(extra, expected_extra);
}

TEST(SbatchInjection, HostileButLegalValuesPassThroughByteForByte) {
  const fs::path dir = temp_dir("sbatch");
  SlurmJob j = slurm_job(dir);
  const std::vector<std::string> odd = {"a b",     "it's",  "\"q\"", "$(touch PWNED)", "`touch PWNED`", "; touch PWNED",
                                        "${HOME}", "\\",    "",      "--x='y z'",      "*",             "#not a comment"};
  j.args.insert(j.args.end(), odd.begin(), odd.end());
  j.sbatch_extra = {"--comment=$(touch PWNED) 'x'", "--qos=high"};
  j.env = {{"NCCL_DEBUG", "$(touch PWNED) `touch PWNED` 'q' \"d\""}};
  j.summary = "tiny $(touch PWNED) 'quoted'";
  const std::string script = render_sbatch(j);
  const fs::path file = write_file(dir / "job.sbatch", script);
  EXPECT_EQ(run_shell("bash -n " + file.string() + " 2>&1").rc, 0) << script;
  expect_header_is_directives(script, 2);

  // Run it: srun drops its options and runs the rest; trainbench writes its arguments NUL-separated.
  const fs::path bin = dir / "bin";
  fs::create_directories(bin);
  write_file(bin / "srun", "#!/bin/bash\nwhile [[ \"${1:-}\" == --* ]]; do shift; done\nexec \"$@\"\n", true);
  write_file(j.trainbench, "#!/bin/bash\nprintf '%s\\0' \"$@\" > \"$TB_SUBMIT_DIR/args\"\nprintf '%s' \"$NCCL_DEBUG\" "
                           "> \"$TB_SUBMIT_DIR/env\"\n",
             true);
  const auto r = run_shell("cd " + dir.string() + " && PATH=" + bin.string() + ":$PATH SLURM_JOB_ID=7 bash " +
                           file.string() + " 2>&1");
  EXPECT_EQ(r.rc, 0) << r.out;
  std::ifstream a(dir / "args", std::ios::binary);
  std::vector<std::string> got;
  for (std::string s; std::getline(a, s, '\0');) got.push_back(s);
  std::vector<std::string> want = j.args;
  want.insert(want.end(), {"--out", (dir / "jobs/7/rank0").string()});
  EXPECT_EQ(got, want);
  std::ifstream e(dir / "env");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(e), {}), j.env[0].second);
  EXPECT_FALSE(fs::exists(dir / "PWNED"));
  fs::remove_all(dir);
}

TEST(SbatchInjection, CommandLineSbatchCannotAddLines) {
  const auto r = run_cli({"slurm", "run", "tiny", "--nodes", "1", "--device", "cpu", "--dry-run", "--trainbench",
                          "/opt/tb", "--out", "/tmp/tb-inject", "--sbatch=--qos=x\ntouch PWNED"});
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("newline"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("touch PWNED"), std::string::npos);
}

const std::vector<tb::recipe::Recipe>& recipes() {
  static const auto r = tb::recipe::load_recipes(tb::recipe::find_recipes_dir(std::nullopt));
  return r;
}

K8sJob k8s_job() {
  K8sRequest q;
  q.recipe = "tiny";
  q.device = "cpu";
  q.image = "registry.example/trainbench:0.1";
  return plan_k8s(q, {}, recipes());
}

TEST(K8sInjection, EveryFieldRefusesControlCharactersAndBadNames) {
  using Set = void (*)(K8sJob&, const std::string&);
  const std::vector<std::pair<const char*, Set>> fields = {
      {"namespace", [](K8sJob& j, const std::string& v) { j.namespace_ = v; }},
      {"pvc", [](K8sJob& j, const std::string& v) { j.results_pvc = v; }},
      {"name", [](K8sJob& j, const std::string& v) { j.name = v; }},
      {"service account", [](K8sJob& j, const std::string& v) { j.service_account = v; }},
      {"image", [](K8sJob& j, const std::string& v) { j.image = v; }},
      {"gpu resource", [](K8sJob& j, const std::string& v) { j.gpu_resource = v; }},
      {"shm", [](K8sJob& j, const std::string& v) { j.shm_size = v; }},
      {"summary", [](K8sJob& j, const std::string& v) { j.summary = v; }},
      {"env", [](K8sJob& j, const std::string& v) { j.env = {{"NCCL_DEBUG", v}}; }},
      {"arg", [](K8sJob& j, const std::string& v) { j.args.push_back(v); }},
      {"trainbench", [](K8sJob& j, const std::string& v) { j.trainbench = v; }},
  };
  for (const auto& [name, set] : fields)
    for (const auto& h : kHostile) {
      K8sJob j = k8s_job();
      set(j, h);
      EXPECT_THROW(render_k8s(j), tb::Error) << name << ": " << printable(h);
    }
  for (const char* bad : {"Default", "kube_system", "a b", "-x", "x.y"}) {
    K8sJob j = k8s_job();
    j.namespace_ = bad;
    EXPECT_THROW(render_k8s(j), tb::Error) << bad;
  }
}

// The documents PyYAML reads from the manifest (tests/launch/k8s_check.py).
nlohmann::json read_back(const std::string& yaml) {
  const fs::path dir = temp_dir("k8s");
  const fs::path f = write_file(dir / "m.yaml", yaml);
  const auto r = run_shell("python3 tests/launch/k8s_check.py " + f.string());
  fs::remove_all(dir);
  EXPECT_EQ(r.rc, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

TEST(K8sInjection, HostileButLegalValuesReadBackAsRendered) {
  K8sJob j = k8s_job();
  j.env = {{"NCCL_DEBUG", "x: y --- '\"' # not a comment"}, {"A", "---"}};
  j.args.insert(j.args.end(), {"--- a", "# b", "'c'", "$(touch PWNED)", "{d: e}", "[f]", "&g", "*h", "!i", "|j"});
  j.summary = "tiny --- # 'x' \"y\"";
  for (bool mpi : {false, true}) {
    j.mpi_operator = mpi;
    const std::string yaml = render_k8s(j);
    const nlohmann::json docs = read_back(yaml);
    ASSERT_EQ(docs.size(), mpi ? 1u : 2u) << yaml;
    for (const auto& d : docs) EXPECT_EQ(d["metadata"]["namespace"], "default");
    const auto& c = mpi ? docs[0]["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
                        : docs[1]["spec"]["template"]["spec"]["containers"][0];
    bool seen = false;
    for (const auto& e : c["env"])
      if (e["name"] == "NCCL_DEBUG") seen = e["value"] == j.env[0].second;
    EXPECT_TRUE(seen) << c.dump();
    if (mpi) {  // the command's tail is trainbench and its arguments, unchanged
      const auto& cmd = c["command"];
      ASSERT_GE(cmd.size(), j.args.size());
      for (size_t i = 0; i < j.args.size(); ++i) EXPECT_EQ(cmd[cmd.size() - j.args.size() + i], j.args[i]);
    }
    // The header: comment lines only, up to the first document.
    std::istringstream in(yaml);
    std::string line;
    while (std::getline(in, line) && !line.starts_with("apiVersion")) EXPECT_TRUE(line.starts_with("# ")) << line;
  }
}

TEST(K8sInjection, CommandLineAndEnvironmentRefuseNewlines) {
  const std::string ns = "x\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: pwned, namespace: kube-system}";
  const std::vector<std::string> base = {"k8s", "render", "tiny", "--nodes", "1", "--device", "cpu", "--image", "img"};
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"--namespace", ns}, {"--results-pvc", ns}, {"--name", ns}, {"--image", ns}, {"--", "--set", ns}}) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.rc, 2) << extra[0] << ": " << r.out << r.err;
    EXPECT_EQ(r.out.find("ConfigMap"), std::string::npos);
  }
  ::setenv("TRAINBENCH_K8S_NAMESPACE", ns.c_str(), 1);
  const auto r = run_cli(base);
  ::unsetenv("TRAINBENCH_K8S_NAMESPACE");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("namespace"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("ConfigMap"), std::string::npos);
}

}  // namespace
