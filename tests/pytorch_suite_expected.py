"""tpu-only failures left in PyTorch's own device-generic test files, with why.

A test is listed when it passes in the file's CPU class and fails in its tpu
class; ``python tests/tools/pytorch_suites.py --tests-dir DIR --check`` reports
failures not listed here and listed tests that now pass.  The test files are
PyTorch's (never copied into this repository); the versions measured:

    test/test_shape_ops.py  pytorch/pytorch@13825d261e754f8c743338142d1b68cac16bc670
    test/test_indexing.py   pytorch/pytorch@5183443433dabc82f00dc4298b3af1d4cce25319
    test/test_type_promotion.py     the stored copy the read_file tool calls id 69265644
                                    (56019 characters; imports under torch 2.13)
    test/test_sort_and_select.py    the stored copy id 23920368 (53360 characters)
    test/test_reductions.py pytorch/pytorch@20d26decd96326b8777d0bd8b591e593a2e7b758 (173074 characters)
    test/test_view_ops.py   pytorch/pytorch@9c491bc34c6ab131b18cf51db02636d65ffd3472
    test/test_tensor_creation_ops.py  pytorch/pytorch@20f43ac258d25405127c49b89ffeb32a696cdb30
        (its bare ``@skipIfTorchDynamo`` at line 4024 needs ``()`` to import under torch 2.13)
    test/test_autograd.py   pytorch/pytorch@5c322af10e52e4d236104ceefd542f34e6dcf20a (read_file id 7726625,
        576866 characters; imports under torch 2.13): only its device-type class TestAutogradDeviceType,
        kept with the file's imports (the other classes are not device-generic)
    test/test_unary_ufuncs.py   the stored copy the read_file tool calls id 107413372 (65544 characters)
    test/test_binary_ufuncs.py  the stored copy id 10488157 (183228 characters; imports under torch 2.13
        with ``binary_ufuncs_and_refs`` dropped from its import list and defined as ``binary_ufuncs``,
        which holds the _refs too in torch 2.13)
    test/test_torch.py      pytorch/pytorch@e121c6ea4c91fb2e6c506175cf9d87e512211afb (409890 characters; imports under
        torch 2.13 with ``skipIfMps`` imported as ``skipIfMPS as skipIfMps`` and ``tf32_is_not_fp32``, gone from
        common_cuda, defined in the file to return False): only its device-type class TestTorchDeviceType
    test/test_foreach.py    the stored copy the read_file tool calls id 45103009 (55558 characters; imports
        under torch 2.13 as it is), kept without its CUDA-only tests (@onlyCUDA, or skipped without CUDA or
        without several GPUs), which neither the CPU class nor tpu's runs
    test/test_scatter_gather_ops.py  pytorch/pytorch@00d73471c2dc65d96b9e799ba1c62933d482c94b (58010 characters;
        imports under torch 2.13 with ``all_passthru_types``/``all_passthru_types_and``, gone from common_dtype,
        defined in the file as all_types_and_complex_and(bool, half, bfloat16, uint16, uint32, uint64) (+ the
        extra dtypes), and ``gfx_arch_supports_opportunistic_fastatomics``, gone from common_cuda, as False; the
        CPU's gather refuses uint16/32/64, so those fail on both), run with ``-k "not _large"`` (see LARGE)
    test/test_segment_reductions.py  pytorch/pytorch@00755801f10f8b2394ee200b283402f6d7fd1ca0 (18562 characters);
        its @onlyCPU test_pytorch_scatter_test_cases run on tpu too from a copy without the decorator: 40 pass
    test/test_spectral_ops.py  pytorch/pytorch@001e2dbee6e55bf6a0850b53e0a17d8e6e645f89 (69173 characters): the
        whole file in two runs (the _refs twins, the istft trial loops, the stft round trips and fft2_numpy apart):
        248 CPU passes, all pass on tpu (librosa is not installed: its two tests skip on both)
    test/test_optim.py      pytorch/pytorch@c96bc81bc2d0c9bdacd9aa6cbda691777bd299c0 (44194 characters; its
        TestOptimRenewed, OptimizerInfo-based; imports under torch 2.13 with its three ``from optim.* import``
        lines, the test/optim/ classes that are not device-generic, dropped)
    test/test_modules.py    pytorch/pytorch@33263640046f558d38b8e4bc306b1ca6abbf0b1f (44117 characters; imports
        under torch 2.13; test_pickle's ``torch.load(f)`` made ``torch.load(f, weights_only=False)``: torch 2.6+
        refuses to unpickle a whole module by default, so it fails on the CPU too), in two runs:
        ``-k "float32 and not gradgrad and not test_grad_ and not parity and not device_ctx"`` (1033 tests,
        851 CPU passes with test_pickle) and ``-k "float64 and (test_forward or test_memory_format or
        test_errors or test_check_inplace)"`` (289 tests, 236 CPU passes); test_grad/test_gradgrad not run
    test/test_transformers.py  pytorch/pytorch@00030eb8e81f911c48c4d7634fa6b8bb2fae1a1b (186547 characters):
        its device-type classes TestTransformers, TestSDPAFailureModes, TestSDPA and TestAttnBias with the
        file's imports and helpers; TestSDPACudaOnly (instantiated for cuda only) and TestSDPAPrivateUse1Only
        (a C++ extension's "foo" device, not device-generic) dropped with the import of
        test_cpp_extensions_open_device_registration they need; ``device_types`` made ("cpu", "cuda", "tpu")
        (its instantiations are only_for that tuple).  Run whole in two parts, ``-k "not vs_math_cpu and not
        fused_sdp_choice_cpu and not compile"`` (139 tpu tests, 88 CPU passes) and ``-k compile`` (8, 7), and
        test_train_with_pad_and_catch_error with PYTORCH_TEST_WITH_SLOW=1.  Ten tests fail on both devices:
        their random bool masks leave some query row with no key, which the tests' references make NaN and
        SDPA (math path and fused kernels alike) makes 0
    test/nn/test_multihead_attention.py  pytorch/pytorch@03f76200b7b3eccc1be6d93f2841dcfea04d972e (40474
        characters): only its device-type class TestMultiheadAttentionNNDeviceType, kept with the file's imports
        (TestMultiheadAttentionNN is not device-generic): 13 tpu tests, all pass (the CPU runs 7: six are
        @onlyCUDAAndPRIVATEUSE1)
    test/test_nn.py     pytorch/pytorch@74f2fa66feec00335f72813782f4802e80bff4cb (read_file id 9567937, 640159
        characters; imports under torch 2.13 as it is): only its device-type class TestNNDeviceType, kept with the
        file's imports and the module-level affine_grid helpers its test_affine_* tests call (TestNN and the
        other classes are not device-generic), in parts: ``-k "not upsamplingBiMode2d"`` (289 tests, 214 CPU
        passes), ``-k "upsamplingBiMode2d and not consistency"`` (128, 100), and the 768
        test_upsamplingBiMode2d_consistency cases in four ``-k "consistency and ..."`` runs split by
        num_channels, batch_size and check_as_unsqueezed_3d_tensor (768 CPU passes, all pass on tpu)
    test/nn/test_pooling.py  pytorch/pytorch@00b6bcf576b703b3b347b09c330571375069ffdb (78952 characters; imports
        under torch 2.13): only its device-type class TestPoolingNNDeviceType, kept with the file's imports
        (TestAvgPool, TestPoolingNN and their instantiate_parametrized_tests line dropped): 51 CPU passes
    test/nn/test_convolution.py  pytorch/pytorch@00131b6bd4bedfa71eb27b407292be0ba45e5ee8 (157407 characters;
        imports under torch 2.13): only TestConvolutionNNDeviceType, kept with the file's imports and without
        its @onlyCUDA and @onlyCPU tests (and test_conv_backend's cuda/cudnn/miopen/mkldnn subtests, and the
        helpers only those use), which tpu's class does not run; the whole of it in three runs:
        ``-k "not conv_backend and not float64 and not complex128"`` (46 tests), ``-k "(float64 or complex128)
        and not conv_backend"`` (6) and ``-k conv_backend`` (144; see CONV_BACKEND_ENUM)
    test/nn/test_dropout.py  pytorch/pytorch@09d3a8687489ca4b89f667780644d6aceea9e30b (13194 characters, as
        it is): 5 CPU passes in TestDropoutNNDeviceType, all pass on tpu
    test/nn/test_embedding.py  pytorch/pytorch@013a59d6d3b4d2ac367f0ef146c61568ca9f8f2d (63768 characters;
        imports under torch 2.13): only TestEmbeddingNNDeviceType with the file's imports, without its @onlyCUDA
        test (test_embedding_max_norm_device); the whole of it (139 tests) in four tpu runs with
        ``--test-timeout 600``: ``-k "not embedding_bag_device and not 1D_padding_idx"`` (121 tests),
        ``-k "embedding_bag_device and tpu_int32_"`` (8), ``-k "embedding_bag_device and tpu_int64_"`` (8) and
        ``-k 1D_padding_idx`` (2): 139 CPU passes; on tpu 106 pass and the other 33 end as sparse COO skips
        (EXPECTED_UNSUPPORTED_SKIPS), each after its dense cases passed; no tpu-only failure (the 1D_padding_idx
        pair runs past the 120 CPU-second limit with an empty persistent compilation cache: EMBEDDING_BAG_COMPILES).
        The dense cases those skips cut short (the sum mode of test_embedding_bag_1D/2D_padding_idx, the
        sparse=False half of test_EmbeddingBag_per_sample_weights_and_no_offsets, which runs after its
        sparse=True half) ran from a copy with sparse=True dropped from those three tests' loops: 8 of 8 pass on
        tpu (7 in one run, whose process then died at the memory-map limit below, and the 8th,
        test_embedding_bag_2D_padding_idx_tpu_float64, alone).  Not in one process: the tpu pytest process keeps
        every executable it built, and an XLA:CPU executable holds 3 memory maps per compiled kernel while it
        lives (measured: ~4 for a one-kernel elementwise op, ~35 for an embedding_bag forward or backward), so a
        whole-file run reached the kernel's vm.max_map_count (65530) and died of SIGSEGV in its 67th test
        (test_embedding_bag_device, loading an executable).  Since 4958e86 the cached executables are
        released past 60% of that limit (ops/map_limit.py)

An index out of range is an IndexError at the op when the index's values are
known on the host (built from a list or a CPU tensor, or filled/written with
Python numbers: ``ops/host_mirror.py``); an index computed on the device is
checked at the next host read, as CUDA's device-side asserts (the suite tool
synchronizes after each test, so such an error is charged to its own test).

Keys: file name -> {"Class::test": reason}.
"""

# Not supported on tpu (the decision for each): torch_tpu raises UnsupportedOnTpu
# (a NotImplementedError), never a wrong answer, and torch_tpu's test base
# (torch_tpu/testing/device_type.py, given to PyTorch as TORCH_TEST_DEVICES)
# turns exactly that into a skipped test, as PyTorch's skip decorators skip.
QUANTIZED = ("quantized tensors are not supported on tpu (quantize_per_tensor of a tpu tensor raises "
             "NotImplementedError 'quantized tensors are not supported on tpu'); only the quantized part of the "
             "test fails, its float32 flips pass")
SPARSE = ("sparse COO tensors are not supported on tpu (to_sparse / sparse_coo_tensor of a tpu tensor raises "
          "NotImplementedError 'sparse COO tensors are not supported on tpu')")
COMPLEX32 = ("complex32 (chalf) is not a tpu dtype (XLA has no complex32); float16 tensor + Python complex "
             "promotes to it, so that sum fails too (Tensor.__add__ turns the TypeError into 'unsupported operand')")
QUANTIZED_EMPTY = ("quantized tensors are not supported on tpu (_empty_affine_quantized with device=tpu raises "
                   "NotImplementedError 'quantized tensors are not supported on tpu')")
RANDOM_INPUTS_BOTH = (
    "random start/end compared with NumPy at complex64's default tolerance: fails for most draws on the CPU too "
    "(measured over 40 draws: CPU 30 failures, tpu 19), so it passes or fails by chance on either device")
COMPLEX32_AS_RUNTIME_ERROR = (
    "float16 with a 0-d complex tensor or a Python complex promotes to complex32, which tpu refuses with "
    "UnsupportedOnTpu (a NotImplementedError, so a RuntimeError to Python); the test catches it and then "
    "expects torch.promote_types to refuse the pair too. The test base skips a test that fails after a "
    "refusal it caught")
QUANTIZED_DTYPE = ("quantized dtypes (qint8, quint8, qint32, quint4x2, quint2x4) are not tpu dtypes: torch_tpu's "
                   "test base skips a test instantiated for one")
UNSUPPORTED_FEATURES = (QUANTIZED, SPARSE, COMPLEX32, QUANTIZED_EMPTY, QUANTIZED_DTYPE)
FIRST_CALL_COMPILE = (
    "runs ops on hundreds of new shapes; each new shape compiles an XLA executable (~0.04-0.1 s each on "
    "this machine), so the test can run past the 180 s per-test timeout (CPU seconds since suitesc; wall before)")

XLA_IGAMMA = (
    "igamma/igammac of float32 at a ~ x ~ 50: XLA's algorithm is off by up to 1.5e-5 (absolute) from "
    "SciPy where the CPU's Cephes port is within 1e-5; float64: the 500x500 XLA igamma runs past the "
    "180 s per-test timeout")

CUDA_DIVISION_BY_ZERO = (
    "integer fmod/remainder by zero: the test expects the CPU's ZeroDivisionError only on the CPU and CUDA's "
    "undefined bit patterns on every other device; tpu raises the CPU's error")

# suitesb: test_sort_and_select / test_reductions
INDEX_ON_CPU = (
    "index_fill of a tpu tensor with a 1-element CPU index tensor: 'Expected all tensors to be on the same "
    "device' (CUDA's TensorIterator refuses it the same way; the test returns before these samples on cuda)")
VIEW_OFFSET_COMPILES = (
    "assertIsOrdered compares 2048 column slices one by one: each slice's storage offset is a new "
    "executable (~0.1 s each), past the 180 s per-test timeout (the timeout then surfaces inside JAX's "
    "cache lookup as a pytree-equality RuntimeError)")
UNIQUE_DIM_NAN_ORDER = (
    "unique(x, dim=0) of a 1-d tensor with NaNs: the CPU's std::sort with a '<' comparator leaves NaN slices "
    "where insertion sort leaves them ([nan, 0, nan, nan, 1]); tpu sorts NaN slices last, each distinct "
    "([0, 1, nan, nan, nan], as torch.unique without dim gives on both); every other case of the test passes")

# ttorch: test_torch.py's TestTorchDeviceType
CPU_ONLY_MAP = (
    "Tensor.map_ / map2_ call a Python function per element and are implemented for CPU tensors only (PyTorch "
    "raises TypeError 'map_ is only implemented on CPU tensors' for every other device; the test returns before "
    "them only on CUDA)")
COV_DIVIDED_BY_ZERO = (
    "cov of complex64 with correction equal to the number of observations divides by zero: a diagonal element's "
    "imaginary part is a rounding residue of the product (about 1e-7, either sign, from the CPU's matmul; often "
    "exactly 0 from XLA's), so the quotient's imaginary part is +-inf on the CPU and NaN on tpu (the test compares "
    "with NumPy, whose residues differ again); every finite case agrees")

STORAGE_SLICE = (
    "slicing a tpu UntypedStorage (storage[a:b], which bytes_to_scalar does) makes a new storage that aliases part "
    "of another's memory; torch_tpu's storages each hold a whole device buffer, so the slice has none and reading "
    "it raises 'tpu storage has no device buffer' (a clear RuntimeError, no wrong value)")
LEGACY_STORAGE_CLASS = (
    "Tensor.storage_type() of a PrivateUse1 tensor is getattr(torch.tpu, 'FloatStorage'); the legacy typed-storage "
    "classes exist for the CPU and CUDA only, so it is None; the test expects the CPU's torch.FloatStorage for "
    "every device but CUDA")

# suites-sg: test_scatter_gather_ops
COMPLEX_PRODUCT_ROUNDING = (
    "complex products: XLA computes a complex multiply's (ac - bd, ad + bc) with a fused multiply-add, "
    "differently in the scatter's multiply combiner and in tpu's elementwise mul (which the test's expected "
    "value uses, one element at a time); each is an ulp off the CPU's (c10's separately rounded products) in "
    "~40% of elements (measured on 2000 complex64 products: scatter 839, mul 861, in strict mode too), within "
    "PyTorch's default tolerance; the test compares the two at atol=0.  No XLA option turns contraction off")
LARGE = (
    "512M-element tensors (@serialTest, sized for a 22 GB GPU): on this 23 GB machine the tpu process is "
    "killed for memory (which kills other processes' work too: run the file with -k 'not _large').  Drawing "
    "make_tensor's random values costs ~17-32 bytes per element transiently (JAX's threefry words on XLA:CPU: "
    "randint of 4x2^23 int8 +1.1 GB, the CPU +0.03 GB), ~17 GB at this size; the stepped-view write that "
    "built an int64 index of every element is fixed (views.writer)")

# suites-modules: test_modules.py
GROUP_NORM_AUTOGRAD_LAYOUT = (
    "GroupNorm's input gradient of a channels_last input comes back row-major: autograd's formula for "
    "native_group_norm (derivatives.yaml) hands native_group_norm_backward the gradient and the input made "
    "contiguous in the input's suggested format on the CPU only, row-major on every other device (CUDA, MPS and "
    "XPU skip this test for GroupNorm in common_modules); the forward keeps channels_last, and "
    "native_group_norm_backward called directly keeps it as the CPU's does (tests/test_nn.py).  Values agree")

# suites-attn: test_transformers.py
NESTED_ENCODER = (
    "nn.TransformerEncoder(enable_nested_tensor=True), in eval mode without autograd and given a left-aligned "
    "src_key_padding_mask, packs the batch into a nested tensor (aten::_nested_tensor_from_mask); nested tensors "
    "do not exist on tpu, so that op raises NotImplementedError naming the way around it "
    "(enable_nested_tensor=False: the padded batch then runs as is, with the mask, on the fast path)")

# suites-nn: test_nn.py's TestNNDeviceType
NESTED_TENSOR = (
    "nested (strided NestedTensor) tensors have no tpu kernels: a nested tensor on tpu can be built, but every op "
    "on it (here aten::_transformer_encoder_layer_fwd, the eval-mode fast path of TransformerEncoderLayer) reaches "
    "the NestedTensorPrivateUse1 key, where nothing is registered, and PyTorch's dispatcher raises "
    "NotImplementedError 'Could not run ... from the NestedTensortpu backend' (no wrong value)")
UINT8_RESAMPLING = (
    "the test expects bilinear/bicubic interpolate of a uint8 tensor to raise 'not implemented for' on every "
    "device but 'cpu' (CUDA has no uint8 kernel); tpu computes it as the CPU does (the same values as the CPU's "
    "uint8 kernel, test_upsamplingBiMode2d_consistency), so no error is raised")

CONV_BACKEND_ENUM = (
    "asserts which ATen convolution backend torch._C._select_conv_backend picks (Slow2d, SlowTranspose2d, "
    "SlowDilated2d/3d) before computing anything: ATen's select_conv_backend answers Overrideable for any "
    "non-empty tensor of a PrivateUse1 device (the enum names only CPU/CUDA/MPS/XPU kernels), which torch_tpu "
    "cannot change; the rest of the test (backward, forward AD, gradcheck and gradgradcheck in float64) passes "
    "on tpu from a copy without that assert, and its empty-input subtests, where ATen answers Empty as on the "
    "CPU, pass as they are")

EMBEDDING_BAG_COMPILES = (
    "compile count, not a wrong value: the test takes every index value of its bags in turn as padding_idx, an "
    "int of the op's signature (ints are static arguments: only Scalars and tensors are traced), so each value "
    "compiles a forward and a backward program for the 1-d call and again for the 2-d one; with an empty "
    "persistent compilation cache the float32 test builds 620 executables, 93 of its 119 CPU seconds in XLA "
    "compiles, and runs past the suite's 120 CPU-second limit.  With the cache warm (the test seeds its draws, so a "
    "second run loads the same programs) each takes about 43 CPU s, its dense cases pass, and it ends as an "
    "unsupported (sparse=True) skip")

EXPECTED_FAILURES = {
    "test_embedding.py": {
        f"TestEmbeddingNNDeviceTypeTPU::test_embedding_bag_1D_padding_idx_tpu_{d}": EMBEDDING_BAG_COMPILES
        for d in ("float32", "float64")},
    "test_pooling.py": {},
    "test_dropout.py": {},
    "test_convolution.py": {
        **{f"TestConvolutionNNDeviceTypeTPU::test_conv_backend_{case}_has_bias_{b}_strided_{s}_contiguous_{c}_tpu":
           CONV_BACKEND_ENUM
           for case in ("slow1d", "slow1d_transposed", "slow1d_dilated", "slow1d_dilated_transposed", "slow2d",
                        "slow2d_transposed", "slow2d_dilated", "slow2d_dilated_transposed", "slow3d_dilated")
           for b in ("False", "True") for s in ("False", "True") for c in ("False", "True")},
    },
    "test_multihead_attention.py": {},
    "test_transformers.py": {
        "TestTransformersTPU::test_transformerencoder_batch_first_True_training_False_enable_nested_tensor_True_tpu":
            NESTED_ENCODER,
        **{"TestTransformersTPU::test_transformerencoder_fastpath_use_torchscript_False_enable_nested_tensor_True_"
           f"use_autocast_{a}_d_model_{d}_tpu": NESTED_ENCODER for a in ("False", "True") for d in (12, 256)},
    },
    "test_modules.py": {
        **{f"TestModuleTPU::test_memory_format_nn_GroupNorm_tpu_{d}": GROUP_NORM_AUTOGRAD_LAYOUT
           for d in ("float32", "float64")},
    },
    "test_segment_reductions.py": {},
    "test_spectral_ops.py": {},
    "test_scatter_gather_ops.py": {
        "TestScatterGatherTPU::test_scatter__reductions_tpu_complex64": COMPLEX_PRODUCT_ROUNDING,
        "TestScatterGatherTPU::test_scatter_reduce_prod_tpu_complex64": COMPLEX_PRODUCT_ROUNDING,
        "TestScatterGatherTPU::test_scatter_reduce_prod_tpu_complex128": COMPLEX_PRODUCT_ROUNDING,
        "TestScatterGatherTPU::test_gather_large_tpu_int8": LARGE,
        "TestScatterGatherTPU::test_gather_large_tpu_bfloat16": LARGE,
    },
    # test_optim.py whole (its @onlyCUDA tests skip on both).  Also run from a local copy with fused declared
    # on tpu where it is on the CPU (optim_db's supports_fused_on) and the device-agnostic @onlyCUDA tests
    # opened (test_fused_matches_forloop, test_set_default_dtype_works_with_foreach, test_mixed_device_dtype
    # and test_state_dict_with_cuda_params on one device): all pass but two artifacts of that copy:
    # test_mixed_device_dtype foreach Adagrad compares foreach with forloop on 6-element float16 tensors at 5x
    # float16's tolerance and misses by one element (its CPU twin misses the same way for ASGD and RMSprop;
    # each tpu path matches the CPU's), and test_state_dict_with_cuda_params expects a fused optimizer's step
    # on the CPU, where torch 2.13 moves it to the parameter's device.  That copy found the in-place
    # _foreach_mul_ number rounding, the list addcmul/addcdiv operand cast, and the fused Adam(W) gradient
    # unscaling, all fixed.
    "test_optim.py": {},
    "test_sort_and_select.py": {
        **{f"TestSortAndSelectTPU::test_stable_sort_against_numpy_tpu_{d}": INDEX_ON_CPU for d in (
            "bfloat16", "float16", "float32", "float64", "int16", "int32", "int64", "int8", "uint8")},
        "TestSortAndSelectTPU::test_sort_tpu": VIEW_OFFSET_COMPILES,
        # 36 random (k, dim, direction, transpose) cases plus k=2000 of 100000: each a new compile
        "TestSortAndSelectTPU::test_topk_tpu": FIRST_CALL_COMPILE,
        "TestSortAndSelectTPU::test_unique_dim_tpu": UNIQUE_DIM_NAN_ORDER,
    },
    # measured on a selection only (see the note of the suitesb session): random shapes and every
    # combination of dims x keepdim, each a new executable
    "test_reductions.py": {
        "TestReductionsTPU::test_amin_amax_some_dims_tpu": FIRST_CALL_COMPILE,
        "TestReductionsTPU::test_argminmax_multiple_tpu_float16": FIRST_CALL_COMPILE,
        "TestReductionsTPU::test_argminmax_multiple_tpu_float32": FIRST_CALL_COMPILE,
    },
    "test_indexing.py": {},
    # test_foreach.py measured in parts (its 2304 test_parity cases are slow on this machine): every test
    # but test_parity, and 79 test_parity fastpath cases (float32/int64/bool/complex64).  (The clamp of
    # complex tensors by numbers that computed on tpu where the CPU refuses is refused now, single-tensor
    # clamp by a complex number and a list's maximum/minimum by numbers too.)  Then (issue 21's
    # list-number packing) every test_pointwise_op_with_tensor_of_scalarlist_overload case (48) and
    # the out-of-place fastpath test_parity of add/mul/div/addcdiv/addcmul in float64, float16,
    # bfloat16, int32, uint8 and complex128 (30): all pass, once _foreach_add/_sub read alpha as add does;
    # the in-place fastpath parity of add/sub/mul/div/addcdiv/addcmul/lerp and the out-of-place one of
    # sub/lerp/clamp_min/clamp_max/maximum/minimum/pow in float16, bfloat16 and float64 (42): all pass,
    # once a half list's number is rounded to its dtype as the single-tensor kernels round it, and
    # _foreach_sub refuses bools as sub does.  The out-of-place fastpath parity of the 31 unary ops in
    # float16/bfloat16 (62) and the binary ops' scalar, error, inf/nan and lifetime tests (297 run,
    # as on the CPU): all pass.  test_autodiff is @onlyCUDA; run from a copy without that decorator
    # (float64 and complex128 gradchecks, 96 each): tpu fails only what the CPU fails, once
    # sigmoid_backward/tanh_backward conjugate the derivative for complex tensors.  The fastpath parity
    # of the binary and pointwise ops in int8, int16 and complex128 (72): all pass once clamp by a
    # complex number is refused as on the CPU.  The unary ops' fastpath parity in-place in float64 and
    # complex128 and out-of-place in float32 and int64 (124): all pass.
    "test_foreach.py": {},
    # suitesa's files
    "test_tensor_creation_ops.py": {
        "TestTensorCreationTPU::test_logspace_vs_numpy_complex_tpu_complex64": RANDOM_INPUTS_BOTH,
    },
    # suitesa (this session): a fixed subset of each file (tests/tools/pytorch_suites.py --select; see
    # /work/notes/result-suitesa.md): every hand-written test function, every 30th float32 OpInfo test
    "test_unary_ufuncs.py": {
        "TestUnaryUfuncsTPU::test_igamma_common_tpu_float32": XLA_IGAMMA,
        "TestUnaryUfuncsTPU::test_igammac_common_tpu_float32": XLA_IGAMMA,
        "TestUnaryUfuncsTPU::test_igamma_common_tpu_float64": XLA_IGAMMA,
    },
    "test_torch.py": {
        "TestTorchDeviceTypeTPU::test_broadcast_fn_map_tpu": CPU_ONLY_MAP,
        "TestTorchDeviceTypeTPU::test_broadcast_fn_map2_tpu": CPU_ONLY_MAP,
        "TestTorchDeviceTypeTPU::test_cov_tpu_complex64": COV_DIVIDED_BY_ZERO,
        **{f"TestTorchDeviceTypeTPU::test_storage_tpu_{d}": STORAGE_SLICE for d in (
            "bool", "complex128", "complex64", "float32", "float64", "int16", "int32", "int64", "int8", "uint8")},
        **{f"TestTorchDeviceTypeTPU::test_tensor_storage_type_tpu_{d}": LEGACY_STORAGE_CLASS for d in (
            "bfloat16", "bool", "complex128", "complex64", "float16", "float32", "float64", "int16", "int32",
            "int64", "int8", "uint8")},
    },
    "test_nn.py": {
        "TestNNDeviceTypeTPU::test_TransformerEncoderLayer_empty_tpu": NESTED_TENSOR,
        **{f"TestNNDeviceTypeTPU::test_upsamplingBiMode2d_nonsupported_dtypes_antialias_{aa}_num_channels_{c}_mode_"
           f"{m}_uint8_tpu_uint8": UINT8_RESAMPLING
           for aa in ("False", "True") for c in (3, 5) for m in ("bilinear", "bicubic")},
    },
    "test_binary_ufuncs.py": {
        **{f"TestBinaryUfuncsTPU::test_fmod_remainder_by_zero_integral_tpu_{dt}": CUDA_DIVISION_BY_ZERO
           for dt in ("int16", "uint8", "int64")},
    },
}

# Tests torch_tpu's test base skips (UnsupportedOnTpu, or a complex32 / quantized dtype) whose CPU
# twins pass; the tool counts them apart (not in the ratio), as tests skipped by PyTorch's decorators.
EXPECTED_UNSUPPORTED_SKIPS = {
    "test_embedding.py": {  # sparse=True embeddings: sparse COO gradients (each after its dense cases passed)
        **{f"TestEmbeddingNNDeviceTypeTPU::{t}": SPARSE for t in (
            "test_EmbeddingBag_per_sample_weights_and_no_offsets_tpu_int32_float32",
            "test_EmbeddingBag_per_sample_weights_and_no_offsets_tpu_int32_float64",
            "test_EmbeddingBag_per_sample_weights_and_no_offsets_tpu_int64_float32",
            "test_EmbeddingBag_per_sample_weights_and_no_offsets_tpu_int64_float64",
            "test_embedding_backward_tpu_float64",
            "test_embedding_bag_2D_padding_idx_tpu_float32",
            "test_embedding_bag_2D_padding_idx_tpu_float64",
            "test_embedding_bag_bfloat16_tpu_int32_int32",
            "test_embedding_bag_bfloat16_tpu_int32_int64",
            "test_embedding_bag_bfloat16_tpu_int64_int32",
            "test_embedding_bag_bfloat16_tpu_int64_int64",
            "test_embedding_bag_device_tpu_int32_int32_bfloat16",
            "test_embedding_bag_device_tpu_int32_int32_float16",
            "test_embedding_bag_device_tpu_int32_int32_float32",
            "test_embedding_bag_device_tpu_int32_int32_float64",
            "test_embedding_bag_device_tpu_int32_int64_bfloat16",
            "test_embedding_bag_device_tpu_int32_int64_float16",
            "test_embedding_bag_device_tpu_int32_int64_float32",
            "test_embedding_bag_device_tpu_int32_int64_float64",
            "test_embedding_bag_device_tpu_int64_int32_bfloat16",
            "test_embedding_bag_device_tpu_int64_int32_float16",
            "test_embedding_bag_device_tpu_int64_int32_float32",
            "test_embedding_bag_device_tpu_int64_int32_float64",
            "test_embedding_bag_device_tpu_int64_int64_bfloat16",
            "test_embedding_bag_device_tpu_int64_int64_float16",
            "test_embedding_bag_device_tpu_int64_int64_float32",
            "test_embedding_bag_device_tpu_int64_int64_float64",
            # (with the persistent compilation cache warm; cold, they time out: EMBEDDING_BAG_COMPILES)
            "test_embedding_bag_1D_padding_idx_tpu_float32",
            "test_embedding_bag_1D_padding_idx_tpu_float64",
            "test_embedding_bag_half_tpu_int32_int32",
            "test_embedding_bag_half_tpu_int32_int64",
            "test_embedding_bag_half_tpu_int64_int32",
            "test_embedding_bag_half_tpu_int64_int64",
        )},
    },
    "test_optim.py": {  # SparseAdam: sparse gradients
        **{f"TestOptimRenewedTPU::test_{t}_SparseAdam_tpu_float32": SPARSE for t in (
            "deepcopy_copies_all_public_attrs", "forloop_goes_right_direction_contiguous_False",
            "forloop_goes_right_direction_contiguous_True", "load_nontensor_step", "param_groups_lr",
            "param_groups_weight_decay", "step_is_noop_for_zero_grads")},
    },
    "test_shape_ops.py": {
        "TestShapeOpsTPU::test_flip_tpu_float32": QUANTIZED,
    },
    "test_type_promotion.py": {
        **{f"TestTypePromotionTPU::{t}": SPARSE for t in (
            "test_sparse_add_tpu", "test_sparse_sub_tpu", "test_sparse_mul_tpu", "test_sparse_div_tpu",
            *(f"test_sparse_div_promotion_tpu_{d}" for d in ("bool", "int16", "int32", "int64", "uint8")))},
        **{f"TestTypePromotionTPU::{t}": COMPLEX32 for t in (
            "test_complex_half_tpu", "test_complex_promotion_tpu", "test_complex_assertraises_tpu")},
        **{f"TestTypePromotionTPU::test_result_type_tpu_{a}_{b}": COMPLEX32_AS_RUNTIME_ERROR
           for a, b in (("complex128", "float16"), ("complex64", "float16"), ("float16", "complex128"),
                        ("float16", "complex64"))},
    },
    "test_view_ops.py": {
        "TestViewOpsTPU::test_view_as_real_tpu_complex32": COMPLEX32,
        "TestOldViewOpsTPU::test_ravel_tpu": QUANTIZED_EMPTY,
        "TestOldViewOpsTPU::test_flatten_tpu": QUANTIZED_EMPTY,
    },
    "test_tensor_creation_ops.py": {
        "TestTensorCreationTPU::test_cat_all_dtypes_and_devices_tpu": COMPLEX32,
        "TestTensorCreationTPU::test_fill_all_dtypes_and_devices_tpu": COMPLEX32,
        "TestTensorCreationTPU::test_zeros_tpu": COMPLEX32,
        "TestTensorCreationTPU::test_ones_tpu": COMPLEX32,
        "TestTensorCreationTPU::test_tensor_factories_empty_tpu": COMPLEX32,
        "TestTensorCreationTPU::test_torch_complex_tpu_float16": COMPLEX32,
        "TestRandomTensorCreationTPU::test_randn_tpu_complex32": COMPLEX32,
        "TestRandomTensorCreationTPU::test_rand_tpu_complex32": COMPLEX32,
        "TestTensorCreationTPU::test_tensor_ctor_device_inference_tpu": SPARSE,
    },
    # ttorch: test_torch.py's TestTorchDeviceType
    "test_torch.py": {
        "TestTorchDeviceTypeTPU::test_complex_half_experimental_warning_tpu": COMPLEX32,
        "TestTorchDeviceTypeTPU::test_item_tpu_complex32": COMPLEX32,
        **{f"TestTorchDeviceTypeTPU::test_copy__tpu_{d}": COMPLEX32 for d in (  # each copies from every dtype
            "bfloat16", "bool", "complex128", "complex32", "complex64", "float16", "float32", "float64", "int16",
            "int32", "int64", "int8", "uint8")},
        "TestTorchDeviceTypeTPU::test_memory_format_empty_like_tpu": SPARSE,
        **{f"TestTorchDeviceTypeTPU::test_nondeterministic_resize_quantized_tpu_{d}": QUANTIZED_DTYPE for d in (
            "qint32", "qint8", "quint2x4", "quint4x2", "quint8")},
        **{f"TestTorchDeviceTypeTPU::test_storage_setitem_tpu_{d}": QUANTIZED_DTYPE for d in (
            "qint32", "qint8", "quint4x2", "quint8")},
    },
    "test_scatter_gather_ops.py": {
        **{f"TestScatterGatherTPU::test_gather_backward_with_empty_index_tensor_sparse_grad_True_tpu_{d}": SPARSE
           for d in ("float32", "float64")},
    },
    # suitesd's file: TestAutogradDeviceType only
    "test_autograd.py": {
        **{f"TestAutogradDeviceTypeTPU::{t}": SPARSE for t in (
            "test_sparse_backward_tpu_float64", "test_sparse_backward_tpu_complex128",
            "test_sparse_ctor_getter_backward_tpu_float64", "test_sparse_ctor_getter_backward_tpu_complex128",
            "test_sparse_mask_autograd_tpu")},
    },
}
