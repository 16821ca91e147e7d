#!/usr/bin/env python3
"""Copy kernels-common/ into OUT/kernels-common with CUDA's launch syntax turned into calls of
emu.h's emulated launches (kernel<<<grid, block, smem, stream>>>(args) ->
emu_launch_cfg(emu_cfg(grid, block, smem, stream), [&] { kernel(args); })) and the dynamic
shared array of moe.cuh pointed at emu.h's buffer.  usage: transform.py REPO OUT"""
import os
import re
import sys

repo, out = sys.argv[1], sys.argv[2]
src, dst = os.path.join(repo, 'kernels-common'), os.path.join(out, 'kernels-common')
os.makedirs(dst, exist_ok=True)
launch = re.compile(r'([A-Za-z_][A-Za-z_0-9]*(?:<[^<>;]*?>)?)<<<(.*?)>>>\((.*?)\);', re.S)
for f in os.listdir(src):
    s = open(os.path.join(src, f)).read()
    s = s.replace('extern __shared__ float weft_moe_p[];', 'float *weft_moe_p = (float *)emu_dyn_smem.data();')
    # launch_matmul.cuh's macro launch has no ';' of its own
    s = s.replace('weft_k_mmvq<T, NR><<<grid, block, 0, st>>>(m->w, m->w_nb1, m->N, nb32, q, R, out, m->out_ld, add, \\\n'
                  '                                               m->add_ld, m->bias)',
                  'emu_launch_cfg(emu_cfg(grid, block, 0, st), [&] { weft_k_mmvq<T, NR>(m->w, m->w_nb1, m->N, nb32, q, '
                  'R, out, m->out_ld, add, m->add_ld, m->bias); })')
    s = launch.sub(lambda m: 'emu_launch_cfg(emu_cfg(%s), [&] { %s(%s); });' % (m.group(2), m.group(1), m.group(3)), s)
    if '<<<' in s:
        sys.exit('transform.py: a launch in %s was not converted' % f)
    open(os.path.join(dst, f), 'w').write(s)
