"""ge-hub's own plugin: the core op set, kernels, passes and CLI commands.

They register through the same hooks as any outside plugin's (`ge_hub.hookspecs`).
"""

from __future__ import annotations

from ge_hub.plugins import hookimpl


@hookimpl
def register_ops(registry):
    from ge_hub.ops import core_schemas

    for schema in core_schemas():
        registry.add_op(schema)


@hookimpl
def register_kernels(registry):
    from ge_hub.kernels import builtin_kernels

    for kernel in builtin_kernels():
        registry.add_kernel(kernel)


@hookimpl
def register_passes(registry):
    from ge_hub.passes import cse
    from ge_hub.passes.eliminate_dead_code import eliminate_dead_code
    from ge_hub.passes.fold_batch_norm import fold_batch_norm_pass
    from ge_hub.passes.fuse_attention import fuse_attention_pass
    from ge_hub.passes.fuse_conv_epilogue import fuse_conv_epilogue_pass
    from ge_hub.passes.fuse_gelu import fuse_gelu_pass
    from ge_hub.passes.fuse_layer_norm import fuse_layer_norm_pass
    from ge_hub.passes.fuse_matmul_epilogue import fuse_matmul_epilogue_pass
    from ge_hub.passes.lower_control_flow import lower_control_flow
    from ge_hub.passes.prune_unused_outputs import prune_unused_outputs
    from ge_hub.passes.simplify import simplify_pass
    from ge_hub.registry import PassSpec

    registry.add_pass(simplify_pass())
    registry.add_pass(PassSpec(cse.NAME, cse.eliminate_common_subexpressions, stage="optimize",
                               doc="merge equal constants, then nodes computing the same "
                                   "thing from the same inputs"))
    registry.add_pass(PassSpec("eliminate_dead_code", eliminate_dead_code, stage="optimize",
                               doc="remove nodes and constants nothing reads"))
    # After dead code is gone, so that outputs read only by dead nodes count as unread.
    registry.add_pass(PassSpec("prune_unused_outputs", prune_unused_outputs, stage="optimize",
                               doc="drop trailing optional outputs that nothing reads"))
    registry.add_pass(fold_batch_norm_pass())
    # Before the Conv epilogue, which takes a Gelu node but not GELU written out.
    registry.add_pass(fuse_gelu_pass())
    registry.add_pass(fuse_layer_norm_pass())
    registry.add_pass(fuse_attention_pass())
    # After the fold, so that Conv + BatchNormalization + Relu ends as one step.
    registry.add_pass(fuse_conv_epilogue_pass())
    # After fuse_gelu and fuse_layer_norm (whose SkipLayerNormalization takes the bias and
    # residual Adds in front of a LayerNormalization).
    registry.add_pass(fuse_matmul_epilogue_pass())
    # After the fusions (a FusedConv is marked as one product), before kernels are chosen.
    from ge_hub.passes.precision import assign_precision

    registry.add_pass(PassSpec("assign_precision", assign_precision, stage="fuse",
                               doc="mark the products that run in bf16 (the precision "
                                   "option: fp32, bf16, mixed)"))
    # After the marks, which pick the folded node's kernel (bf16 or fp32).
    from ge_hub.passes import fold_matmul_views

    registry.add_pass(PassSpec(fold_matmul_views.NAME, fold_matmul_views.fold_matmul_views,
                               stage="fuse",
                               doc="the Transposes, Splits and Reshapes around a MatMul of "
                                   "two activations -> one StridedMatMul reading and "
                                   "writing through strided views"))
    # After the marks and the Conv fusions: it takes bf16 FusedConvs as they are.
    from ge_hub.passes import channels_last

    registry.add_pass(PassSpec(channels_last.NAME, channels_last.convert_to_channels_last,
                               stage="fuse",
                               doc="neighbouring bf16 Convs on AMX -> FusedConvNHWC on "
                                   "channels-last tensors, Transposes at the chain's edges"))
    # After the marks (only a pointwise Conv marked bf16 is fused with its depthwise reader)
    # and after channels_last, which takes both into its chains where it can (bf16 on AMX).
    from ge_hub.passes import fuse_pointwise_depthwise as pointwise_depthwise

    registry.add_pass(PassSpec(pointwise_depthwise.NAME,
                               pointwise_depthwise.fuse_pointwise_depthwise, stage="fuse",
                               doc="a bf16 pointwise Conv and the depthwise Conv that alone "
                                   "reads it -> one PointwiseDepthwise step, band by band",
                               rules=(pointwise_depthwise.RULE,)))
    # After every other fusion, so that it only takes the elementwise ops they left.
    from ge_hub.passes.fuse_elementwise import fuse_elementwise

    registry.add_pass(PassSpec("fuse_elementwise", fuse_elementwise, stage="fuse",
                               doc="chains and trees of float32 elementwise ops -> one "
                                   "FusedElementwise, evaluated per tile"))
    # Last before kernels are chosen: the Closure it leaves is what gets a kernel.
    registry.add_pass(PassSpec("lower_control_flow", lower_control_flow, stage="fuse",
                               doc="make If/Loop/Scan nodes Closures: bodies serialized, "
                                   "captured values explicit inputs"))
    # Once kernels are chosen (it needs to know which nodes are steps), before schedule.
    from ge_hub.passes import concat_in_place

    registry.add_pass(PassSpec(concat_in_place.NAME, concat_in_place.concat_in_place,
                               stage="select",
                               doc="a Concat whose inputs are contiguous slices of its "
                                   "output runs no step: they are written in place"))


@hookimpl
def register_frontends(registry):
    from ge_hub.frontends import gehub
    from ge_hub.registry import Frontend

    registry.add_frontend(Frontend(
        name="ge-hub-ir", accepts=gehub.accepts, load=gehub.load,
        suffixes=(gehub.SUFFIX,), magic=(gehub.MAGIC,),
        doc=f"ge-hub's own serialized graphs: {gehub.SUFFIX} files (ge_hub.ir.serialize)"))
    from ge_hub.offline import frontend as offline_frontend

    registry.add_frontend(Frontend(
        name="ge-hub-offline", accepts=offline_frontend.accepts, load=offline_frontend.load,
        suffixes=(offline_frontend.SUFFIX,), magic=(offline_frontend.MAGIC,),
        doc=f"ge-hub's compiled offline models: {offline_frontend.SUFFIX} files "
            "(ge_hub.offline; ge_hub.load_compiled runs their plans)"))


@hookimpl
def register_commands(registry):
    from ge_hub.commands.ops import OPS_COMMAND
    from ge_hub.commands.passes import PASSES_COMMAND
    from ge_hub.commands.plugins import PLUGINS_COMMAND
    from ge_hub.commands.run import RUN_COMMAND

    registry.add_command(PLUGINS_COMMAND)
    registry.add_command(OPS_COMMAND)
    registry.add_command(RUN_COMMAND)
    registry.add_command(PASSES_COMMAND)
    from ge_hub.commands.compile import COMPILE_COMMAND
    from ge_hub.commands.inspect import INSPECT_COMMAND

    registry.add_command(COMPILE_COMMAND)
    registry.add_command(INSPECT_COMMAND)
    from ge_hub.commands.profile import PROFILE_COMMAND

    registry.add_command(PROFILE_COMMAND)
    from ge_hub.commands.compare import COMPARE_COMMAND

    registry.add_command(COMPARE_COMMAND)
    from ge_hub.commands.bench import BENCH_COMMAND

    registry.add_command(BENCH_COMMAND)
