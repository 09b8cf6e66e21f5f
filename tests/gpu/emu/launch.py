#!/usr/bin/env python3
# launch.py: rewrite a CUDA source for the CPU emulation (emu.cc).
#
#	launch.py in.cu > out.cc
#
# A launch "kernel<<<grid, block, smem, stream>>>(args);" (the callee is
# everything from the start of its line) becomes
# "emu_launch(grid, block, smem, stream, [=, a = emu_args(kernel)(args)]() {
# apply(kernel, a); });": the arguments are converted to the kernel's
# parameter types and stored at the launch, as
# CUDA does, so a launch recorded by a stream capture and replayed later
# sees the values it was given, not what its pointers point to then; and
# "extern __shared__ T name[];" becomes a pointer to the emulated dynamic
# shared memory.  Nothing else changes.
import re
import sys


def rewrite(src):
    src = re.sub(r'extern __shared__ (\w+)\s+(\w+)\[\];',
                 r'\1 *\2 = (\1 *)emu_dyn_smem;', src)
    out, i = [], 0
    while True:
        j = src.find('<<<', i)
        if j < 0:
            out.append(src[i:])
            return ''.join(out)
        start = src.rfind('\n', 0, j) + 1
        while src[start] in ' \t':
            start += 1
        k = src.find('>>>', j)
        if k < 0 or src[k + 3] != '(':
            sys.exit('launch.py: cannot parse the launch at offset %d' % j)
        depth, p = 0, k + 3
        while True:
            if src[p] == '(':
                depth += 1
            elif src[p] == ')':
                depth -= 1
                if depth == 0:
                    break
            p += 1
        out.append(src[i:start])
        kern = src[start:j]
        out.append('emu_launch(%s, [=, emu_a = emu_args(%s)(%s)]() { '
                   'std::apply(%s, emu_a); })' %
                   (src[j + 3:k], kern, src[k + 4:p], kern))
        i = p + 1


with open(sys.argv[1]) as f:
    sys.stdout.write(rewrite(f.read()))
