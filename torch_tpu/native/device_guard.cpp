// The tpu device's guard in C++.  PyTorch asks a device's guard for the
// current device and stream around much of its work: autograd records each
// result's stream when it builds a graph node (twice for a forward op with a
// gradient) and its engine sets device and stream for every backward node:
// ~530 calls in one training step of the benchmarks' micro GPT.  The guard
// PyTorch registers for a Python backend (torch.utils.backend_registration)
// answers every one by calling the Python method type_(), taking the GIL and
// looking the method up first.  This one answers the same things without
// Python: one device (index 0), its default stream only, no events.  It
// replaces the Python-backed guard when the helper is loaded.
#include "helper.h"

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_tpu_native {
namespace {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

struct TpuGuard final : public c10::impl::DeviceGuardImplInterface {
  static c10::Device device() { return c10::Device(kTpu, 0); }
  static c10::Stream default_stream() { return c10::Stream(c10::Stream::DEFAULT, device()); }

  c10::DeviceType type() const override { return kTpu; }
  c10::Device exchangeDevice(c10::Device) const override { return device(); }
  c10::Device getDevice() const override { return device(); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override { return default_stream(); }
  c10::Stream getNewStream(c10::Device, int) const override { return default_stream(); }
  c10::Stream exchangeStream(c10::Stream) const noexcept override { return default_stream(); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  // XLA orders a device's work itself: events and stream waits have nothing to do
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};

TpuGuard guard;  // registered for the life of the process

}  // namespace

PyObject* register_device_guard(PyObject*, PyObject*) {
  // (an atomic store into PyTorch's per-device-type table: replaces the Python-backed guard)
  c10::impl::registerDeviceGuard(kTpu, &guard);
  Py_RETURN_NONE;
}

}  // namespace torch_tpu_native
