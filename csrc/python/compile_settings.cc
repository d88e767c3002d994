#include "python/compile_settings.h"

#include <pybind11/stl.h>

#include "aten/precision_policy.h"
#include "exec/compile_settings.h"
#include "exec/program_cache.h"

namespace py = pybind11;

namespace tpu::python {
namespace {

pjrt::CompileOptions::Override to_override(const std::string& name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  throw py::type_error("custom_compiler_options: the value of " + name +
                       " must be a bool, int, float or str, got " + std::string(py::str(py::type::handle_of(v))));
}

py::object from_override(const pjrt::CompileOptions::Override& v) {
  if (auto* s = std::get_if<std::string>(&v)) return py::str(*s);
  if (auto* b = std::get_if<bool>(&v)) return py::bool_(*b);
  if (auto* i = std::get_if<int64_t>(&v)) return py::int_(*i);
  return py::float_(std::get<double>(v));
}

}  // namespace

void bind_compile_settings(py::module_& m) {
  m.def("_push_precision", &aten::push_precision);
  m.def("_pop_precision", &aten::pop_precision);
  m.def("_precision_override", &aten::precision_override);

  m.def("_push_compiler_options", [](const py::dict& options) {
    std::vector<exec::CompilerOption> list;
    for (const auto& [k, v] : options) {
      if (!py::isinstance<py::str>(k)) {
        throw py::type_error("custom_compiler_options: option names must be strings, got " +
                             std::string(py::repr(k)));
      }
      const std::string name = k.cast<std::string>();
      list.emplace_back(name, to_override(name, v));
    }
    exec::push_compiler_options(std::move(list));
  });
  m.def("_pop_compiler_options", &exec::pop_compiler_options);
  m.def("_compiler_options", [] {
    py::dict d;
    for (const auto& [name, value] : exec::current_compiler_options()) d[py::str(name)] = from_override(value);
    return d;
  });
  // Compiles a one-op program with this thread's settings: the plugin's verdict on them.
  m.def("_check_compile_settings", [] {
    static const char* kProbe =
        "module @settings_probe {\n"
        "  func.func public @main(%a: tensor<f32>) -> tensor<f32> {\n"
        "    %r = stablehlo.add %a, %a : tensor<f32>\n"
        "    return %r : tensor<f32>\n"
        "  }\n"
        "}\n";
    py::gil_scoped_release release;
    exec::ProgramCache::get().compile(kProbe, "a probe of the compiler options");
  });
  m.def("_allow_excess_precision_setting", [] {
    auto s = exec::allow_excess_precision_setting();
    return s ? py::object(py::bool_(*s)) : py::object(py::none());
  });
  m.def("_set_allow_excess_precision", &exec::set_allow_excess_precision);
  // What selects a compiled program besides its inputs: options, excess precision, precision.
  m.def("_compile_settings_key", [] {
    const int p = aten::precision_override();
    const std::string& key = exec::settings_key();
    if (p < 0 && key.empty()) return py::bytes("");
    return py::bytes(key + "p=" + std::to_string(p));
  });
}

}  // namespace tpu::python
